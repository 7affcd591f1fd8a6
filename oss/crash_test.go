package oss

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/oss/osd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// childEnv tells the test binary to run as an OSS process: DIR,PORT.
const childEnv = "NACRE_OSS_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

// runChild serves one OST from a directory until killed.
func runChild(spec string) int {
	dir, portS, _ := strings.Cut(spec, ",")
	port, _ := strconv.Atoi(portS)
	cfg := lnet.DefaultConfig()
	cfg.Logger = quiet
	nc, _ := lnet.ParseNetworks("tcp(127.0.0.2)")
	nc[0].Options = map[string]string{"port": strconv.Itoa(port)}
	cfg.Networks = nc
	ln, err := lnet.New(context.Background(), cfg)
	if err != nil {
		fmt.Println("lnet:", err)
		return 2
	}
	// The client writing when the kill comes never comes back: recovery,
	// which lets the checking client in only once it is over, waits for it
	// a second.
	s, err := New(Config{LNet: ln, Logger: quiet, RecoveryWindow: time.Second})
	if err != nil {
		fmt.Println("oss:", err)
		return 2
	}
	if _, err := os.Stat(filepath.Join(dir, "osd")); os.IsNotExist(err) {
		os.MkdirAll(filepath.Join(dir, "osd"), 0o755)
		if err := osd.Format(context.Background(), "file", filepath.Join(dir, "osd"), osd.FormatOptions{Label: ostLabel(0)}); err != nil {
			fmt.Println("format:", err)
			return 2
		}
	}
	dev, err := osd.Open(context.Background(), "file", filepath.Join(dir, "osd"), osd.OpenOptions{Logger: quiet})
	if err != nil {
		fmt.Println("open:", err)
		return 2
	}
	if _, err := s.AddOST(dev, ostLabel(0), "crash-ost-uuid"); err != nil {
		fmt.Println("add ost:", err)
		return 2
	}
	fmt.Printf("ready %s %d\n", ln.NIDs()[len(ln.NIDs())-1], ln.PID())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	return 0
}

// crashServer is an OSS child process.
type crashServer struct {
	cmd *exec.Cmd
	id  lwire.ProcessID
}

func startCrashServer(t *testing.T, dir string, port int) *crashServer {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d", childEnv, dir, port))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var nid string
	var pid uint32
	if _, err := fmt.Sscanf(line, "ready %s %d", &nid, &pid); err != nil {
		t.Fatalf("child said %q", line)
	}
	n, err := lwire.ParseNID(nid)
	if err != nil {
		t.Fatal(err)
	}
	return &crashServer{cmd: cmd, id: lwire.ProcessID{NID: n, PID: pid}}
}

// TestCrash kills the OSS process with SIGKILL in the middle of a stream
// of writes, restarts it, and checks that every write acknowledged as
// durable (a SYNC answered after it) is there byte for byte, and that the
// object is whole: every byte below its size is what was written there.
func TestCrash(t *testing.T) {
	const chunk = 256 << 10
	dir := t.TempDir()
	for round, delay := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond} {
		port := lnettest.FreePort(t, "127.0.0.2", "127.0.0.30")
		srv := startCrashServer(t, dir, port)
		ln := lnettest.Start(t, "127.0.0.30", port)
		c := ptlrpc.NewClient(ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, Logger: quiet})
		imp, err := c.NewImport(ptlrpc.ImportConfig{Target: ostLabel(0), Servers: []lwire.ProcessID{srv.id}, Portal: ptlrpc.OSTIOPortal,
			PingInterval: -1, MinTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		oc := &ostClient{t: t, c: c, imps: []*ptlrpc.Import{imp}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		f := oc.precreate(ctx, 0, 1)[0]
		kill := time.AfterFunc(delay, func() { srv.cmd.Process.Kill() })
		durable := 0 // chunks known durable
		for i := 0; ; i++ {
			// A request to a killed server waits for a reconnect that
			// never comes: each gets a short deadline instead.
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := imp.Do(wctx, oc.writeReq(f, []wire.Niobuf{{Offset: uint64(i * chunk), Len: chunk}}, [][]byte{pattern(chunk, uint64(round*10000+i))}, false))
			if err == nil && i%4 == 3 {
				_, err = imp.Do(wctx, &ptlrpc.Req{Opcode: wire.OSTSync, Body: body(t, &ostv1.SyncRequest{Fid: ofdFID(f)})})
				if err == nil {
					durable = i + 1
				}
			}
			wcancel()
			if err != nil {
				break
			}
			if i > 100000 {
				t.Fatal("the kill never came")
			}
		}
		kill.Stop()
		srv.cmd.Process.Kill()
		srv.cmd.Wait()
		cancel()
		imp.Close(context.Background())
		if durable == 0 {
			t.Logf("round %d: killed before the first sync", round)
		}

		// Restart on the same directory and check.
		port2 := lnettest.FreePort(t, "127.0.0.2", "127.0.0.31")
		srv2 := startCrashServer(t, dir, port2)
		ln2 := lnettest.Start(t, "127.0.0.31", port2)
		c2 := ptlrpc.NewClient(ln2, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.OSCReplyPortal, Logger: quiet})
		imp2, err := c2.NewImport(ptlrpc.ImportConfig{Target: ostLabel(0), Servers: []lwire.ProcessID{srv2.id}, Portal: ptlrpc.OSTIOPortal, PingInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		oc2 := &ostClient{t: t, c: c2, imps: []*ptlrpc.Import{imp2}}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
		a, err := oc2.getattr(ctx2, 0, f)
		if err != nil {
			t.Fatalf("round %d: object after restart: %v", round, err)
		}
		if a.Size < uint64(durable*chunk) || a.Size%chunk != 0 {
			t.Fatalf("round %d: size %d after restart; %d chunks were durable (a torn size)", round, a.Size, durable)
		}
		n := int(a.Size / chunk)
		for i := range n {
			got := make([]byte, chunk)
			if _, err := imp2.Do(ctx2, oc2.readReq(f, []wire.Niobuf{{Offset: uint64(i * chunk), Len: chunk}}, [][]byte{got}, true)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, pattern(chunk, uint64(round*10000+i))) {
				t.Fatalf("round %d: chunk %d of %d (durable %d) differs after the crash", round, i, n, durable)
			}
		}
		// The restarted target hands out new objects after the old ones.
		if g := oc2.precreate(ctx2, 0, 1)[0]; g.Oid <= f.Oid {
			t.Fatalf("round %d: precreate after restart gave %v, not after %v", round, g, f)
		}
		cancel2()
		imp2.Close(context.Background())
		srv2.cmd.Process.Signal(syscall.SIGTERM)
		srv2.cmd.Wait()
		t.Logf("round %d: killed after %v; %d chunks durable, %d present", round, delay, durable, n)
	}
}

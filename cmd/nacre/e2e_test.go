package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/etcdserver"
	"github.com/nacrefs/nacre/internal/etcdserver/etcdtest"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

var nacreBin string

func TestMain(m *testing.M) {
	if clustertest.IsChild() {
		clustertest.Main(m) // a child OSS of an in-process cluster (lctl_test.go)
	}
	dir, err := os.MkdirTemp("", "nacre-e2e-")
	if err != nil {
		panic(err)
	}
	nacreBin = filepath.Join(dir, "nacre")
	if out, err := exec.Command("go", "build", "-o", nacreBin, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type upProc struct {
	cmd      *exec.Cmd
	out      *strings.Builder
	grpcAddr string
	httpAddr string
	done     chan error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	u, err := etcdserver.FreeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u, "http://")
}

// startUp runs `nacre up` and waits for its "ready" line.
func startUp(t *testing.T, data string, ports [4]string, extra ...string) *upProc {
	t.Helper()
	_, lport, _ := strings.Cut(freeAddr(t), ":")
	args := append([]string{"up", "--data", data,
		"--etcd-client-url", "http://" + ports[0], "--etcd-peer-url", "http://" + ports[1],
		"--grpc-addr", ports[2], "--http-addr", ports[3], "--port", lport, "--socket", filepath.Join(data, "lnet.sock")}, extra...)
	cmd := exec.Command(nacreBin, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &upProc{cmd: cmd, out: &strings.Builder{}, grpcAddr: ports[2], httpAddr: ports[3], done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.out.WriteString(sc.Text() + "\n")
			if sc.Text() == "ready" {
				close(ready)
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	select {
	case <-ready:
	case err := <-p.done:
		t.Fatalf("nacre up exited before ready: %v\n%s", err, p.out)
	case <-time.After(60 * time.Second):
		t.Fatalf("nacre up not ready in 60s:\n%s", p.out)
	}
	return p
}

func (p *upProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("nacre up exited with %v after SIGTERM:\n%s", err, p.out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nacre up did not stop within 30s of SIGTERM")
	}
	if !strings.Contains(p.out.String(), "shutting down") {
		t.Fatalf("no shutdown message:\n%s", p.out)
	}
}

func httpDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestUpEndToEnd(t *testing.T) {
	data := t.TempDir()
	ports := [4]string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	p := startUp(t, data, ports, "--fsname", "e2efs")
	for _, want := range []string{`filesystem "e2efs"`, "grpc   " + ports[2], "rest   http://" + ports[3], "admin.token",
		"mdt    e2efs-MDT0000", "ost    e2efs-OST0000", "ost    e2efs-OST0003"} {
		if !strings.Contains(p.out.String(), want) {
			t.Fatalf("startup output lacks %q:\n%s", want, p.out)
		}
	}
	// lnetctl reaches the cluster's LNet, and a net added at run time
	// shows.
	sock := filepath.Join(data, "lnet.sock")
	if !strings.Contains(p.out.String(), "lnetctl --socket "+sock) {
		t.Fatalf("startup output lacks the lnetctl socket:\n%s", p.out)
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock, "net", "add", "--net", "tcp7", "--ip", "127.0.0.77"); err != nil || !strings.Contains(out, "127.0.0.77@tcp7") {
		t.Fatalf("lnetctl net add on nacre up: %v\n%s", err, out)
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock, "net", "show"); err != nil || !strings.Contains(out, "127.0.0.77@tcp7") || !strings.Contains(out, "net type: tcp\n") {
		t.Fatalf("lnetctl net show on nacre up: %v\n%s", err, out)
	}
	tokb, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokb))
	if fi, _ := os.Stat(filepath.Join(data, "admin.token")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	base := "http://" + p.httpAddr

	if code, _ := httpDo(t, "GET", base+"/api/v1/filesystems", "", ""); code != 401 {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code, body := httpDo(t, "GET", base+"/api/v1/filesystems/e2efs", token, ""); code != 200 || !strings.Contains(body, `"name":"e2efs"`) {
		t.Fatalf("GET filesystem: %d %s", code, body)
	}
	if code, body := httpDo(t, "PUT", base+"/api/v1/params/e2efs.client.llite.max_read_ahead_mb", token, `{"value":"128"}`); code != 200 {
		t.Fatalf("PUT param: %d %s", code, body)
	}

	// The same cluster over gRPC: register an OST, create a pool.
	cc, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := mgsv1.NewMGSClient(cc).RegisterTarget(ctx, &mgsv1.RegisterTargetRequest{Fsname: "e2efs", Kind: mgsv1.TargetKind_TARGET_KIND_OST, Nids: []string{"127.0.0.1@tcp"}})
	if err != nil {
		t.Fatal(err)
	}
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if _, err := adminv1.NewAdminClient(cc).CreatePool(actx, &adminv1.CreatePoolRequest{Fsname: "e2efs", Name: "fast"}); err != nil {
		t.Fatal(err)
	}
	p.stop(t)

	// Restart on the same data: every change is still there, the token too.
	p = startUp(t, data, ports, "--fsname", "e2efs")
	if code, body := httpDo(t, "GET", base+"/api/v1/params/e2efs.client.llite.max_read_ahead_mb", token, ""); code != 200 || !strings.Contains(body, `"value":"128"`) {
		t.Fatalf("param after restart: %d %s", code, body)
	}
	code, body := httpDo(t, "GET", base+"/api/v1/filesystems/e2efs/targets", token, "")
	if code != 200 || !strings.Contains(body, reg.GetTarget().GetUuid()) {
		t.Fatalf("target after restart: %d %s", code, body)
	}
	// The embedded OSTs kept their identity and registered again, up.
	if reg.GetTarget().GetIndex() != 4 || strings.Count(body, `"state":"TARGET_STATE_UP"`) < 4 || !strings.Contains(body, "e2efs-OST0003") {
		t.Fatalf("embedded OSTs after restart (registered %s): %s", reg.GetTarget().GetName(), body)
	}
	if code, body := httpDo(t, "GET", base+"/api/v1/filesystems/e2efs/pools", token, ""); code != 200 || !strings.Contains(body, `"name":"fast"`) {
		t.Fatalf("pool after restart: %d %s", code, body)
	}
	cfg, err := mgsv1.NewMGSClient(dialT(t, p.grpcAddr)).GetClientConfig(ctx, &mgsv1.GetClientConfigRequest{Fsname: "e2efs"})
	if err != nil || len(cfg.GetConfig().GetParams()) != 1 || len(cfg.GetConfig().GetPools()) != 1 {
		t.Fatalf("config over gRPC after restart: %v %v", cfg, err)
	}
	p.stop(t)
}

func dialT(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Configuration precedence: flags win over NACRE_* variables, which win over
// the config file; --no-auth turns the token off explicitly.
func TestUpConfigPrecedence(t *testing.T) {
	data := t.TempDir()
	ports := [4]string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	cfgFile := filepath.Join(t.TempDir(), "nacre.yaml")
	yaml := "fsname: fromfile\nhttp-addr: 127.0.0.1:1\nauth:\n  tokens:\n    - name: file\n      token: file-token-0123456789abcdef\n      role: readonly\n"
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	// The file says fsname=fromfile and a bad http-addr; the environment
	// overrides fsname; the flag overrides http-addr.
	t.Setenv("NACRE_FSNAME", "fromenv")
	t.Setenv("NACRE_GRPC_ADDR", "127.0.0.1:1") // the --grpc-addr flag wins
	p := startUp(t, data, ports, "--config", cfgFile)
	if !strings.Contains(p.out.String(), `filesystem "fromenv"`) {
		t.Fatalf("env did not win over the file:\n%s", p.out)
	}
	base := "http://" + p.httpAddr
	if code, _ := httpDo(t, "GET", base+"/api/v1/filesystems/fromenv", "file-token-0123456789abcdef", ""); code != 200 {
		t.Fatalf("token from the config file refused: %d", code)
	}
	if code, _ := httpDo(t, "POST", base+"/api/v1/filesystems", "file-token-0123456789abcdef", `{"name":"x"}`); code != 403 {
		t.Fatalf("readonly token from file could write: %d", code)
	}
	if _, err := os.Stat(filepath.Join(data, "admin.token")); err == nil {
		t.Fatal("a token was generated although the config file had one")
	}
	p.stop(t)
	os.Unsetenv("NACRE_FSNAME")
	os.Unsetenv("NACRE_GRPC_ADDR")

	// The data's targets are fromenv's: a restart names that file system.
	p = startUp(t, data, ports, "--fsname", "fromenv", "--no-auth")
	if code, _ := httpDo(t, "POST", base+"/api/v1/filesystems", "", `{"name":"noauth"}`); code != 200 {
		t.Fatalf("--no-auth still asks for a token: %d", code)
	}
	p.stop(t)
}

// `nacre mgs` serves the same API over an etcd it does not own.
func TestMGSOverExternalEtcd(t *testing.T) {
	ec := etcdtest.Start(t, 1)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	cmd := exec.Command(nacreBin, "mgs", "--etcd-endpoints", strings.Join(ec.Endpoints(), ","), "--no-auth", "--grpc-addr", grpcAddr, "--http-addr", httpAddr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, "grpc "+grpcAddr) {
		t.Fatalf("nacre mgs start line %q: %v", line, err)
	}
	if code, body := httpDo(t, "POST", "http://"+httpAddr+"/api/v1/filesystems", "", `{"name":"extfs"}`); code != 200 {
		t.Fatalf("create over external etcd: %d %s", code, body)
	}
	resp, err := ec.Client().Get(context.Background(), "/nacre/filesystems/extfs")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("filesystem not in the external etcd: %v %v", resp, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("nacre mgs exit after SIGTERM: %v", err)
	}
}

func TestMGSRefusesToRunWithoutAuthConfig(t *testing.T) {
	out, err := exec.Command(nacreBin, "mgs", "--etcd-endpoints", "http://127.0.0.1:1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "auth") {
		t.Fatalf("nacre mgs without tokens: err=%v out=%s", err, out)
	}
}

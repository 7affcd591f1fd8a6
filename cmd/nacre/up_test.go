package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer collects a process's output for a test reading it meanwhile.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// upMustFail runs `nacre up` and returns its output once it exits; it
// fails the test if the cluster comes up instead.
func upMustFail(t *testing.T, data string, ports [4]string, extra ...string) string {
	t.Helper()
	_, lport, _ := strings.Cut(freeAddr(t), ":")
	args := append([]string{"up", "--data", data,
		"--etcd-client-url", "http://" + ports[0], "--etcd-peer-url", "http://" + ports[1],
		"--grpc-addr", ports[2], "--http-addr", ports[3], "--port", lport}, extra...)
	cmd := exec.Command(nacreBin, args...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("nacre up %v exited 0:\n%s", extra, out)
			}
			return out.String()
		default:
		}
		if strings.Contains(out.String(), "\nready\n") {
			cmd.Process.Kill()
			<-done
			t.Fatalf("nacre up %v came up:\n%s", extra, out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("nacre up %v neither failed nor came up in 60s:\n%s", extra, out)
		}
	}
}

// TestUpRestartOtherFSName: `nacre up` started again on its data directory
// with another --fsname must refuse, naming the file system the targets
// belong to, and create nothing: serving the old targets while announcing
// (and mounting) a new, empty file system without an MDT or OSTs is not a
// working file system.
func TestUpRestartOtherFSName(t *testing.T) {
	data := t.TempDir()
	ports := [4]string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	p := startUp(t, data, ports, "--fsname", "fsa", "--osts", "1", "--no-auth")
	p.stop(t)

	out := upMustFail(t, data, ports, "--fsname", "fsb", "--osts", "1", "--no-auth")
	if !strings.Contains(out, `file system "fsa", not "fsb"`) || !strings.Contains(out, "--fsname fsa") {
		t.Fatalf("nacre up --fsname fsb on fsa's data: want an error naming fsa:\n%s", out)
	}

	p = startUp(t, data, ports, "--fsname", "fsa", "--osts", "1", "--no-auth")
	code, body := httpDo(t, "GET", "http://"+p.httpAddr+"/api/v1/filesystems", "", "")
	if code != 200 || !strings.Contains(body, `"name":"fsa"`) || strings.Contains(body, "fsb") {
		t.Fatalf("filesystems after the refused start: %d %s (want fsa alone)", code, body)
	}
	code, body = httpDo(t, "GET", "http://"+p.httpAddr+"/api/v1/filesystems/fsa/targets", "", "")
	if code != 200 || strings.Count(body, `"state":"TARGET_STATE_UP"`) != 2 {
		t.Fatalf("fsa's targets: %d %s (want MDT0 and OST0 up)", code, body)
	}
	p.stop(t)
}

// TestUpRestartOtherGRPCAddr: `nacre up` started again on its data
// directory with its MGS on another --grpc-addr (the old port taken) must
// register its embedded targets with its own MGS where it now listens, not
// at the address written in their identities on the first start (nobody
// there, or another cluster's MGS).
func TestUpRestartOtherGRPCAddr(t *testing.T) {
	data := t.TempDir()
	ports := [4]string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	p := startUp(t, data, ports, "--osts", "1", "--no-auth")
	p.stop(t)

	ports[2] = freeAddr(t)
	p = startUp(t, data, ports, "--osts", "1", "--no-auth")
	code, body := httpDo(t, "GET", "http://"+p.httpAddr+"/api/v1/filesystems/nacre/targets", "", "")
	if code != 200 || strings.Count(body, `"state":"TARGET_STATE_UP"`) != 2 || !strings.Contains(body, "nacre-OST0000") {
		t.Fatalf("targets after a restart on grpc %s: %d %s (want MDT0 and OST0 up)", ports[2], code, body)
	}
	p.stop(t)
}

// TestConfigWrongTypeRefused: a value of the wrong type in the config file
// or a NACRE_* variable is an error naming the key, not a silent zero
// (osts: four started a cluster without a data plane).
func TestConfigWrongTypeRefused(t *testing.T) {
	data := t.TempDir()
	ports := [4]string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	cfgFile := filepath.Join(t.TempDir(), "nacre.yaml")
	if err := os.WriteFile(cfgFile, []byte("osts: four\nauth:\n  disabled: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := upMustFail(t, data, ports, "--config", cfgFile)
	if !strings.Contains(out, `config osts (--osts): "four" is not a int`) {
		t.Fatalf("osts: four: want an error naming osts:\n%s", out)
	}

	cmd := exec.Command(nacreBin, "server", "--nid", "127.0.0.1@tcp", filepath.Join(data, "mdt0"))
	cmd.Env = append(os.Environ(), "NACRE_RECOVERY_WINDOW=ninety", "NACRE_PORT=988x")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), `config recovery-window (--recovery-window): "ninety" is not a duration`) ||
		!strings.Contains(string(b), `config port (--port): "988x" is not a int`) {
		t.Fatalf("nacre server with NACRE_RECOVERY_WINDOW=ninety NACRE_PORT=988x: %v\n%s", err, b)
	}

	// Values of the right type still count, from the file and the environment.
	if err := os.WriteFile(cfgFile, []byte("osts: 1\nauth:\n  disabled: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NACRE_LEASE_TTL", "5s")
	p := startUp(t, data, ports, "--config", cfgFile)
	if !strings.Contains(p.out.String(), "ost    nacre-OST0000") || strings.Contains(p.out.String(), "OST0001") {
		t.Fatalf("osts: 1 from the config file:\n%s", p.out)
	}
	p.stop(t)
}

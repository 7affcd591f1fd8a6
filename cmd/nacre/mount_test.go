package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountArgumentErrors: bad sources, options and mount points fail at
// once, with a message that says what is wrong, and never mount.
func TestMountArgumentErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mount"}, "want a source and a mount point"},
		{[]string{"mount", "127.0.0.1@tcp:/fs"}, "want a source and a mount point"},
		{[]string{"mount", "a", "b", "c"}, "want a source and a mount point"},
		{[]string{"mount", "nonsense", dir}, `source "nonsense"`},
		{[]string{"mount", "127.0.0.1@tcp:/", dir}, `source "127.0.0.1@tcp:/"`},
		{[]string{"mount", "127.0.0.1@tcp:/fs", filepath.Join(dir, "missing")}, "mount point"},
		{[]string{"mount", "127.0.0.1@tcp:/fs", file}, "not a directory"},
		{[]string{"mount", "127.0.0.1@tcp:/fs", dir, "-o", "frobnicate"}, `"frobnicate": unknown`},
		{[]string{"mount", "127.0.0.1@tcp:/fs", dir, "-o", "max_dirty_mb=lots"}, "max_dirty_mb"},
		{[]string{"mount", "127.0.0.1@tcp:/fs", dir, "-o", "port=0"}, "port"},
		{[]string{"mount", "127.0.0.1@tcp:/fs", dir, "-o", "lnet_socket=lnet.sock"}, "want lnet_socket=/ABSOLUTE/PATH"},
		{[]string{"mount", "127.0.0.1@tcp:/fs", dir, "-o", "rw,lnet_socket"}, "want lnet_socket=/ABSOLUTE/PATH"},
		{[]string{"mount", "--install-helper", "x"}, "unknown command"},
	} {
		out, err := nacre(t, tc.args...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Fatalf("%q: %v, want a failure\n%s", tc.args, err, out)
		}
		if !strings.Contains(out, tc.want) {
			t.Fatalf("%q: output lacks %q:\n%s", tc.args, tc.want, out)
		}
	}
}

func TestMountHelperArgs(t *testing.T) {
	t.Setenv("NACRE_MOUNT_LOG", "")
	for _, tc := range []struct {
		argv []string
		want []string
		ns   string
		err  bool
	}{
		{[]string{"s:/fs", "/mnt"}, []string{"mount", "--background", "s:/fs", "/mnt", "--log-level=warn"}, "", false},
		{[]string{"s:/fs", "/mnt", "-o", "rw,noatime", "-t", "nacre"}, []string{"mount", "--background", "s:/fs", "/mnt", "-o", "rw,noatime", "--log-level=warn"}, "", false},
		{[]string{"-sv", "s:/fs", "/mnt", "-orw", "-N", "ns"}, []string{"mount", "--background", "s:/fs", "/mnt", "-o", "rw", "--sloppy"}, "ns", false},
		{[]string{"s:/fs", "/mnt", "-N1234"}, []string{"mount", "--background", "s:/fs", "/mnt", "--log-level=warn"}, "1234", false},
		{[]string{"s:/fs", "/mnt", "-n", "-f"}, nil, "", false},
		{[]string{"s:/fs"}, nil, "", true},
		{[]string{"s:/fs", "/mnt", "-o"}, nil, "", true},
		{[]string{"s:/fs", "/mnt", "-N"}, nil, "", true},
		{[]string{"s:/fs", "/mnt", "-x"}, nil, "", true},
	} {
		got, ns, err := mountHelperArgs(tc.argv)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) || ns != tc.ns {
			t.Errorf("mountHelperArgs(%q) = %q, %q, %v; want %q, %q (error %v)", tc.argv, got, ns, err, tc.want, tc.ns, tc.err)
		}
	}
}

// TestMountHelper: invoked as mount.nacre (mount -t nacre), a usage error
// exits 1, a failed mount 32, a fake one (-f) 0.
func TestMountHelper(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "mount.nacre")
	if err := os.Symlink(nacreBin, bin); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	dir := t.TempDir()
	if out, code := run("only-one"); code != 1 || !strings.Contains(out, "want SOURCE DIR") {
		t.Fatalf("usage error: %d %s", code, out)
	}
	if out, code := run("nonsense", dir); code != 32 || !strings.Contains(out, `source "nonsense"`) {
		t.Fatalf("bad source: %d %s", code, out)
	}
	if out, code := run("127.0.0.1@tcp:/fs", dir, "-f"); code != 0 {
		t.Fatalf("fake mount: %d %s", code, out)
	}
}

func requireFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("this test needs FUSE: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
}

// alive says whether process pid runs (a zombie, which nobody may reap
// in a container, does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := bytes.Cut(b, []byte(") "))
	return len(rest) > 0 && rest[0] != 'Z'
}

func mounted(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mounts")
	return bytes.Contains(b, []byte(" "+dir+" fuse.nacre "))
}

// TestUpMountAndMountHelper: `nacre up --mount DIR` serves the file system
// on DIR and unmounts it at SIGTERM; mount.nacre mounts the same file
// system elsewhere in the background, sees the same files, and its server
// ends when umount unmounts it.
func TestUpMountAndMountHelper(t *testing.T) {
	requireFUSE(t)
	mnt, mnt2 := t.TempDir(), t.TempDir()
	_, lport, _ := strings.Cut(freeAddr(t), ":")
	ports := [4]string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	p := startUp(t, t.TempDir(), ports, "--osts", "2", "--no-auth", "--port", lport, "--mount", mnt)
	t.Cleanup(func() {
		for _, d := range []string{mnt, mnt2} {
			if mounted(d) {
				syscall.Unmount(d, syscall.MNT_DETACH)
			}
		}
	})
	if !mounted(mnt) || !strings.Contains(p.out.String(), "mount  "+mnt) {
		t.Fatalf("not mounted on %s:\n%s", mnt, p.out)
	}
	if err := os.WriteFile(filepath.Join(mnt, "hello"), []byte("world"), 0o644); err != nil {
		t.Fatal(err)
	}

	bin := filepath.Join(t.TempDir(), "mount.nacre")
	if err := os.Symlink(nacreBin, bin); err != nil {
		t.Fatal(err)
	}
	_, grpcPort, _ := strings.Cut(ports[2], ":")
	src := "127.0.0.1@tcp:" + grpcPort + ":/nacre"
	sock := filepath.Join(t.TempDir(), "mount-lnet.sock")
	out, err := exec.Command(bin, src, mnt2, "-o", "rw,port="+lport+",lnet_socket="+sock).CombinedOutput()
	if err != nil {
		t.Fatalf("mount.nacre: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`server pid (\d+)`).FindSubmatch(out)
	if m == nil || !mounted(mnt2) {
		t.Fatalf("mount.nacre did not mount %s:\n%s", mnt2, out)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	if b, err := os.ReadFile(filepath.Join(mnt2, "hello")); err != nil || string(b) != "world" {
		t.Fatalf("second mount reads %q %v", b, err)
	}
	// lnet_socket: lnetctl reaches the mount's own LNet (the client's
	// NID, on 127.0.1.0/24), and pings the server through it.
	out, err = exec.Command(nacreBin, "lnetctl", "--socket", sock, "net", "show").CombinedOutput()
	if err != nil || !regexp.MustCompile(`nid: 127\.0\.1\.\d+@tcp`).Match(out) {
		t.Fatalf("lnetctl net show on the mount's socket: %v\n%s", err, out)
	}
	if out, err := exec.Command(nacreBin, "lnetctl", "--socket", sock, "ping", "127.0.0.1@tcp").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "127.0.0.1@tcp") {
		t.Fatalf("lnetctl ping through the mount's LNet: %v\n%s", err, out)
	}
	if out, err := exec.Command("umount", mnt2).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the mount server %d still runs 30s after umount", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Errorf("the mount's lnetctl socket %s outlived it", sock)
	}

	p.stop(t)
	if mounted(mnt) {
		t.Fatalf("%s still mounted after nacre up stopped", mnt)
	}
}

// TestMountHelperNamespace: mount -N NS (mount.nacre SOURCE DIR -N PID)
// mounts in that process's mount namespace, not in the caller's: the
// files are there for the namespace's processes, and an umount there
// ends the mount's server. Its own namespace (-N self) mounts here, and a
// namespace that does not exist fails as a mount failure.
func TestMountHelperNamespace(t *testing.T) {
	requireFUSE(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("this test needs unshare(1) (util-linux): %v", err)
	}
	_, lport, _ := strings.Cut(freeAddr(t), ":")
	ports := [4]string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	p := startUp(t, t.TempDir(), ports, "--osts", "1", "--no-auth", "--port", lport)
	defer p.stop(t)
	_, grpcPort, _ := strings.Cut(ports[2], ":")
	src := "127.0.0.1@tcp:" + grpcPort + ":/nacre"
	bin := filepath.Join(t.TempDir(), "mount.nacre")
	if err := os.Symlink(nacreBin, bin); err != nil {
		t.Fatal(err)
	}

	// A process in a mount namespace of its own (private: nothing mounted
	// in it shows here), where the nacre binary's directory is hidden
	// under an empty tmpfs: the mount there must not need its path.
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs none "+filepath.Dir(nacreBin)+" && exec sleep 600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	nsPID := strconv.Itoa(holder.Process.Pid)
	nsFile := "/proc/" + nsPID + "/ns/mnt"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a, _ := os.Readlink(nsFile)
		b, _ := os.Readlink("/proc/self/ns/mnt")
		if a != "" && a != b {
			break // unshare has made the namespace and exec'd sleep
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare made no namespace")
		}
	}
	inNS := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--mount=" + nsFile, "--"}, args...)...).CombinedOutput()
		return string(out), err
	}

	mnt := t.TempDir()
	out, err := exec.Command(bin, src, mnt, "-o", "port="+lport, "-N", nsPID).CombinedOutput()
	if err != nil {
		t.Fatalf("mount.nacre -N: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`server pid (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("mount.nacre -N printed no server pid:\n%s", out)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	defer syscall.Kill(pid, syscall.SIGKILL)
	if mounted(mnt) {
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		t.Fatalf("mount -N %s mounted %s in the caller's namespace", nsPID, mnt)
	}
	if info, err := os.ReadFile("/proc/" + nsPID + "/mountinfo"); err != nil || !bytes.Contains(info, []byte(" "+mnt+" ")) {
		t.Fatalf("%s not mounted in namespace %s (%v):\n%s", mnt, nsPID, err, info)
	}
	if out, err := inNS("sh", "-c", "echo world > "+mnt+"/hello && cat "+mnt+"/hello"); err != nil || out != "world\n" {
		t.Fatalf("write and read in the namespace: %q %v", out, err)
	}
	if out, err := inNS("umount", mnt); err != nil {
		t.Fatalf("umount in the namespace: %v %s", err, out)
	}
	for deadline := time.Now().Add(30 * time.Second); alive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the mount server %d still runs 30s after umount", pid)
		}
	}

	// -N naming this process's own namespace mounts here, as without it.
	out, err = exec.Command(bin, src, mnt, "-o", "port="+lport, "-N", "/proc/self/ns/mnt").CombinedOutput()
	if err != nil || !mounted(mnt) {
		t.Fatalf("mount.nacre -N of its own namespace: %v (mounted %v)\n%s", err, mounted(mnt), out)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "world\n" {
		t.Fatalf("read here: %q %v", b, err)
	}
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}

	cmd := exec.Command(bin, src, mnt, "-o", "port="+lport, "-N", "/nonexistent/ns")
	out, err = cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 32 || !strings.Contains(string(out), "/nonexistent/ns") {
		t.Fatalf("-N of a namespace that does not exist: %v\n%s", err, out)
	}
}

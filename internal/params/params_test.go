package params

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"osc.*.max_rpcs_in_flight", "osc.nacre-OST0000-osc-ffff01.max_rpcs_in_flight", true},
		{"osc/*/max_rpcs_in_flight", "osc.nacre-OST0000-osc-ffff01.max_rpcs_in_flight", true},
		{"osc.*OST000[01]*.max_dirty_mb", "osc.nacre-OST0001-osc-ffff01.max_dirty_mb", true},
		{"osc.*OST000[01]*.max_dirty_mb", "osc.nacre-OST0002-osc-ffff01.max_dirty_mb", false},
		{"osc.nacre-OST000?-osc-*.stats", "osc.nacre-OST0003-osc-ffff01.stats", true},
		{"osc.*", "osc.nacre-OST0000-osc-ffff01.stats", false}, // a component count differs
		{"*.*.*", "osc.nacre-OST0000-osc-ffff01.stats", true},
		{"ldlm.namespaces.*.lru_size", "ldlm.namespaces.nacre-MDT0000-mdc-ffff01.lru_size", true},
		{"ost.OSS.ost_io.nrs_policies", "ost.OSS.ost_io.nrs_policies", true},
		{"ost.OSS.ost_io.nrs_policie", "ost.OSS.ost_io.nrs_policies", false},
	} {
		got, err := Match(tc.pattern, tc.name)
		if err != nil || got != tc.want {
			t.Errorf("Match(%q, %q) = %v, %v; want %v", tc.pattern, tc.name, got, err, tc.want)
		}
	}
	for _, bad := range []string{"osc.[.x", "osc..x", ""} {
		if _, err := Match(bad, "osc.a.x"); !errors.Is(err, ErrBadName) {
			t.Errorf("Match(%q): %v; want ErrBadName", bad, err)
		}
	}
}

// tunable is a test parameter with a counter of Sets.
type tunable struct {
	v    atomic.Int64
	sets atomic.Int64
}

func (tu *tunable) param(name string) Param {
	return Int(name, "", tu.v.Load, func(n int64) error { tu.sets.Add(1); tu.v.Store(n); return nil }, 1, 256, nil)
}

func testRegistry(t *testing.T) (*Registry, map[string]*tunable) {
	t.Helper()
	r := New()
	ts := map[string]*tunable{}
	for _, n := range []string{"osc.fs-OST0000-osc-c1.max_rpcs_in_flight", "osc.fs-OST0001-osc-c1.max_rpcs_in_flight",
		"osc.fs-OST0000-osc-c1.max_dirty_mb", "osc.fs-OST0001-osc-c1.max_dirty_mb"} {
		tu := &tunable{}
		tu.v.Store(8)
		ts[n] = tu
		if _, err := r.Register(tu.param(n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Register(ReadOnly("osc.fs-OST0000-osc-c1.stats", "", func() string { return "snapshot_time 1 secs\nread_bytes 1 samples [bytes]" })); err != nil {
		t.Fatal(err)
	}
	return r, ts
}

func TestRegister(t *testing.T) {
	r, _ := testRegistry(t)
	if _, err := r.Register(ReadOnly("osc.fs-OST0000-osc-c1.stats", "", func() string { return "" })); !errors.Is(err, ErrExists) {
		t.Fatalf("second Register: %v; want ErrExists", err)
	}
	for _, bad := range []string{"osc..x", "osc.*.x", "osc.a b.x", "osc.a=b", "osc/a", ""} {
		if _, err := r.Register(ReadOnly(bad, "", func() string { return "" })); !errors.Is(err, ErrBadName) {
			t.Errorf("Register(%q): %v; want ErrBadName", bad, err)
		}
	}
	un, err := r.Register(ReadOnly("llite.fs-c1.stats", "", func() string { return "x" }))
	if err != nil {
		t.Fatal(err)
	}
	un()
	un() // twice is harmless
	if _, err := r.Get(false, "llite.*.stats"); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Get after unregister: %v; want ErrNoMatch", err)
	}
	// Shared registrations: the last unregister removes the parameter.
	u1, err := r.Share(ReadOnly("ost.OSS.ost_io.nrs_policies", "", func() string { return "fifo" }))
	if err != nil {
		t.Fatal(err)
	}
	u2, err := r.Share(ReadOnly("ost.OSS.ost_io.nrs_policies", "", func() string { return "other" }))
	if err != nil {
		t.Fatal(err)
	}
	u1()
	if v, err := r.Get(false, "ost.OSS.ost_io.nrs_policies"); err != nil || v[0].Value != "fifo" {
		t.Fatalf("shared param after one unregister: %v %v", v, err)
	}
	u2()
	if _, err := r.Get(false, "ost.OSS.ost_io.nrs_policies"); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("shared param after both unregistered: %v", err)
	}
}

func TestList(t *testing.T) {
	r, _ := testRegistry(t)
	names := func(is []Info) string {
		var s []string
		for _, i := range is {
			s = append(s, i.Name)
		}
		return strings.Join(s, " ")
	}
	got, err := r.List(ListOptions{}, "osc.*")
	if err != nil || names(got) != "osc.fs-OST0000-osc-c1 osc.fs-OST0001-osc-c1" {
		t.Fatalf("list osc.*: %q %v", names(got), err)
	}
	got, err = r.List(ListOptions{Recursive: true}, "osc.*OST0000*")
	if err != nil || names(got) != "osc.fs-OST0000-osc-c1.max_dirty_mb osc.fs-OST0000-osc-c1.max_rpcs_in_flight osc.fs-OST0000-osc-c1.stats" {
		t.Fatalf("list -R: %q %v", names(got), err)
	}
	got, err = r.List(ListOptions{}, "osc.*.stats")
	if err != nil || len(got) != 1 || got[0].Writable {
		t.Fatalf("list osc.*.stats: %+v %v", got, err)
	}
	if _, err := r.List(ListOptions{}, "mdc.*"); !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), "mdc.*") {
		t.Fatalf("list mdc.*: %v; want ErrNoMatch naming the pattern", err)
	}
}

func TestSetAllOrNothing(t *testing.T) {
	r, ts := testRegistry(t)
	sets := func() (n int64) {
		for _, tu := range ts {
			n += tu.sets.Load()
		}
		return n
	}
	for _, tc := range []struct {
		assign []Assignment
		kind   error
		in     string
	}{
		// The second assignment's value is bad: the first is not applied either.
		{[]Assignment{{"osc.*.max_rpcs_in_flight", "16"}, {"osc.*.max_dirty_mb", "0"}}, ErrBadValue, "max_dirty_mb=0: bad value: 0 is out of range [1, 256]"},
		{[]Assignment{{"osc.*.max_rpcs_in_flight", "sixteen"}}, ErrBadValue, "want an integer from 1 to 256"},
		{[]Assignment{{"osc.*.max_rpcs_in_flight", "16"}, {"osc.*.nonesuch", "1"}}, ErrNoMatch, "osc.*.nonesuch: no parameter matches"},
		{[]Assignment{{"osc.*.max_rpcs_in_flight", "16"}, {"osc.*.stats", "0"}}, ErrReadOnly, "osc.fs-OST0000-osc-c1.stats: read-only"},
		{[]Assignment{{"osc.[.x", "16"}}, ErrBadName, "bad pattern"},
	} {
		_, err := r.Set(SetOptions{}, tc.assign...)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("Set(%v): %v; want %v containing %q", tc.assign, err, tc.kind, tc.in)
		}
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("Set(%v): %T is not an *Error", tc.assign, err)
		}
		if n := sets(); n != 0 {
			t.Fatalf("Set(%v) failed but made %d changes", tc.assign, n)
		}
	}
	if _, err := r.Set(SetOptions{DryRun: true}, Assignment{"osc.*.max_rpcs_in_flight", "16"}); err != nil || sets() != 0 {
		t.Fatalf("dry run: %v, %d changes", err, sets())
	}
	got, err := r.Set(SetOptions{}, Assignment{"osc.*.max_rpcs_in_flight", "16"}, Assignment{"osc.fs-OST0001-osc-c1.max_dirty_mb", "32"})
	if err != nil || len(got) != 3 {
		t.Fatalf("Set: %v %v", got, err)
	}
	vals, err := r.Get(false, "osc.*.max_rpcs_in_flight", "osc.*.max_dirty_mb")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, v := range vals {
		lines = append(lines, v.Name+"="+v.Value)
	}
	want := "osc.fs-OST0000-osc-c1.max_rpcs_in_flight=16 osc.fs-OST0001-osc-c1.max_rpcs_in_flight=16 " +
		"osc.fs-OST0000-osc-c1.max_dirty_mb=8 osc.fs-OST0001-osc-c1.max_dirty_mb=32"
	if strings.Join(lines, " ") != want {
		t.Fatalf("after Set:\n%s\nwant\n%s", strings.Join(lines, " "), want)
	}
	// Partial: an assignment matching nothing here is not an error.
	if got, err := r.Set(SetOptions{Partial: true}, Assignment{"mdc.*.max_rpcs_in_flight", "4"}); err != nil || len(got) != 0 {
		t.Fatalf("partial: %v %v", got, err)
	}
}

func TestSetLayerRefuses(t *testing.T) {
	r := New()
	var v atomic.Int64
	v.Store(4)
	// check refuses what the layer cannot take now; Set refusing after
	// Validate passed reports what was set before it.
	fail := atomic.Bool{}
	r.Register(Int("a.x.v", "", v.Load, func(n int64) error { v.Store(n); return nil }, 1, 100,
		func(n int64) error {
			if n%2 == 1 {
				return fmt.Errorf("odd values need an even partner")
			}
			return nil
		}))
	r.Register(Param{Name: "a.y.v", Get: func() (string, error) { return "", errors.New("gone") },
		Set: func(string) error {
			if fail.Load() {
				return errors.New("device went away")
			}
			return nil
		}})
	_, err := r.Set(SetOptions{}, Assignment{"a.*.v", "3"})
	if !errors.Is(err, ErrBadValue) || !strings.Contains(err.Error(), "a.x.v=3: bad value: odd values need an even partner") {
		t.Fatalf("check refusal: %v", err)
	}
	fail.Store(true)
	_, err = r.Set(SetOptions{}, Assignment{"a.*.v", "6"})
	if !strings.Contains(err.Error(), "device went away (already set: a.x.v)") {
		t.Fatalf("late refusal: %v", err)
	}
	vals, err := r.Get(false, "a.*.v")
	if err != nil || vals[0].Value != "6" || vals[1].Err != "gone" {
		t.Fatalf("Get: %+v %v", vals, err)
	}
}

func TestDevices(t *testing.T) {
	r := New()
	u0 := r.RegisterDevice(Device{Type: "osc", Name: "fs-OST0000-osc-c1", UUID: "u1"})
	u1 := r.RegisterDevice(Device{Type: "osc", Name: "fs-OST0001-osc-c1", UUID: "u1", Refs: func() int { return 5 }})
	r.RegisterDevice(Device{Type: "mgc", Name: "MGC127.0.0.1:9999", UUID: "m"})
	again := r.RegisterDevice(Device{Type: "mgc", Name: "MGC127.0.0.1:9999", UUID: "m"})
	u0()
	again()
	r.RegisterDevice(Device{Type: "lov", Name: "fs-clilov-c1", UUID: "u1", Status: func() string { return "IN" }})
	var lines []string
	for _, d := range r.Devices() {
		lines = append(lines, fmt.Sprintf("%d %s %s %s %s %d", d.Index, d.Status, d.Type, d.Name, d.UUID, d.Refs))
	}
	want := "0 IN lov fs-clilov-c1 u1 1|1 UP osc fs-OST0001-osc-c1 u1 5|2 UP mgc MGC127.0.0.1:9999 m 1"
	if got := strings.Join(lines, "|"); got != want {
		t.Fatalf("devices:\n%s\nwant\n%s", got, want)
	}
	u1()
}

func TestStatsFormat(t *testing.T) {
	s := NewStats(time.Unix(100, 5))
	s.Sum("read_bytes", 2, "bytes", 4096, 8192, 12288)
	s.Count("ost_write", 3, "reqs")
	s.Count("ost_punch", 0, "reqs")
	lines := strings.Split(s.String(), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "snapshot_time             ") || !strings.HasSuffix(lines[0], " secs.nsecs") ||
		lines[1] != "start_time                100.000000005 secs.nsecs" ||
		lines[3] != "read_bytes                2 samples [bytes] 4096 8192 12288" ||
		lines[4] != "ost_write                 3 samples [reqs]" {
		t.Fatalf("stats:\n%s", s)
	}
}

func TestServe(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(RunDirEnv, dir)
	r1, ts1 := testRegistry(t)
	r2 := New()
	var v atomic.Int64
	r2.Register(Int("osc.fs-OST0002-osc-c2.max_rpcs_in_flight", "", v.Load, func(n int64) error { v.Store(n); return nil }, 1, 256, nil))
	r2.Register(Int("osc.fs-OST0002-osc-c2.max_dirty_mb", "", v.Load, func(n int64) error { v.Store(n); return nil }, 1, 4, nil))
	r2.RegisterDevice(Device{Type: "osc", Name: "fs-OST0002-osc-c2", UUID: "c2"})
	r1.RegisterDevice(Device{Type: "osc", Name: "fs-OST0000-osc-c1", UUID: "c1"})
	ctx := context.Background()
	stop1, err := Serve(ctx, r1)
	if err != nil {
		t.Fatal(err)
	}
	stop1b, err := Serve(ctx, r1) // a second user of the same socket
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	stop2, err := Serve(cctx, r2)
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	// A socket left by a dead process is skipped, and removed.
	dead := filepath.Join(dir, "999999999.sock")
	os.WriteFile(dead, nil, 0o600)
	os.WriteFile(filepath.Join(dir, "lnet.sock"), nil, 0o600) // not a parameter socket
	socks, err := LocalSockets()
	if err != nil || len(socks) != 3 {
		t.Fatalf("sockets: %v %v", socks, err)
	}
	var skipped []string
	rem := &Remote{Sockets: socks, Skipped: func(p string, _ error) { skipped = append(skipped, p) }}

	vals, err := rem.Get(ctx, "osc.*.max_rpcs_in_flight")
	if err != nil || len(vals) != 3 || len(skipped) != 1 || skipped[0] != dead {
		t.Fatalf("remote get: %v %v (skipped %v)", vals, err, skipped)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead process's socket is still there: %v", err)
	}
	rem.Sockets = slices.DeleteFunc(rem.Sockets, func(p string) bool { return p == dead })
	list, err := rem.List(ctx, false, "osc.*")
	if err != nil || len(list) != 3 {
		t.Fatalf("remote list: %v %v", list, err)
	}
	devs, err := rem.Devices(ctx)
	if err != nil || len(devs) != 2 || devs[1].Index != 1 {
		t.Fatalf("remote devices: %+v %v", devs, err)
	}
	// max_dirty_mb=8 is fine in r1 and out of range in r2: nothing changes.
	if _, err := rem.Set(ctx, Assignment{"osc.*.max_rpcs_in_flight", "32"}, Assignment{"osc.*.max_dirty_mb", "8"}); !errors.Is(err, ErrBadValue) ||
		!strings.Contains(err.Error(), "osc.fs-OST0002-osc-c2.max_dirty_mb=8: bad value: 8 is out of range [1, 4]") {
		t.Fatalf("remote set, bad in one process: %v", err)
	}
	for n, tu := range ts1 {
		if tu.sets.Load() != 0 {
			t.Fatalf("%s was set", n)
		}
	}
	if _, err := rem.Set(ctx, Assignment{"mdc.*.max_rpcs_in_flight", "32"}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("remote set, no match: %v", err)
	}
	got, err := rem.Set(ctx, Assignment{"osc.*.max_rpcs_in_flight", "32"})
	if err != nil || len(got) != 3 || v.Load() != 32 || ts1["osc.fs-OST0000-osc-c1.max_rpcs_in_flight"].v.Load() != 32 {
		t.Fatalf("remote set: %v %v", got, err)
	}
	// Stopping: the socket stays until its last user stops; a context
	// ending stops its Serve.
	stop1()
	stop1()
	if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(os.Getpid())+".sock")); err != nil {
		t.Fatalf("socket gone with a user left: %v", err)
	}
	stop1b()
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		socks, _ := LocalSockets()
		if len(socks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sockets left: %v", socks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := rem.Get(ctx, "osc.*.stats"); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("get with every process gone: %v", err)
	}
}

// TestStaleSockets: the sockets of processes that are gone go away when a
// process starts serving and when lctl finds them, and only those; lctl's
// error does not list them.
func TestStaleSockets(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(RunDirEnv, dir)
	// A PID no process has: one that has exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := cmd.Process.Pid
	// leave makes a socket at name that nothing listens on any more, as a
	// process killed with -9 leaves it; serve one that stays listening.
	leave := func(name string) string {
		p := filepath.Join(dir, name)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close()
		return p
	}
	serve := func(name string) string {
		p := filepath.Join(dir, name)
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return p
	}
	gone := []string{leave(fmt.Sprintf("%d.sock", deadPID)), leave(fmt.Sprintf("%d-1.sock", deadPID)), leave("999999998.sock")}
	kept := []string{
		leave("1.sock"),         // refused, but its PID is alive: maybe between bind and listen
		serve("999999997.sock"), // no such PID here, but it answers: another PID namespace's
		leave("lnet.sock"),      // not a parameter socket
	}
	stop, err := Serve(context.Background(), New())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range gone {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s not removed at Serve: %v", p, err)
		}
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	stop()
	// lctl meets them: it removes them and says how many, naming only the
	// sockets that did not answer for another reason.
	gone = []string{leave(fmt.Sprintf("%d.sock", deadPID)), leave("999999998.sock")}
	socks, err := LocalSockets()
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&Remote{Sockets: socks}).Get(context.Background(), "x.y")
	if !errors.Is(err, ErrNoProcess) || !strings.Contains(err.Error(), "removed 2 sockets of processes that are gone") ||
		strings.Contains(err.Error(), "999999998") || !strings.Contains(err.Error(), "1.sock") {
		t.Fatalf("get with stale sockets: %v", err)
	}
	for _, p := range gone {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s not removed by lctl: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "1.sock")); err != nil {
		t.Errorf("1.sock removed: %v", err)
	}
}

// TestSizeSuffixes: a size parameter (_mb, _kb) takes K, M, G, T, P and
// E suffixes, either case, relative to its own unit, as Lustre's
// lprocfs_str_with_units_to_u64: max_dirty_mb=1G is 1024. A value under
// one unit is refused; plain numbers parse as before (0x hex too); other
// integer parameters take no suffix.
func TestSizeSuffixes(t *testing.T) {
	r := New()
	vals := map[string]int64{}
	intParam := func(name string, lo, hi int64) Param {
		return Int(name, "", func() int64 { return vals[name] }, func(n int64) error { vals[name] = n; return nil }, lo, hi, nil)
	}
	if _, err := r.RegisterAll(intParam("osc.a.max_dirty_mb", 1, 2048), intParam("osd-file.b.direct_write_min_kb", 0, 1<<20),
		intParam("osc.a.max_rpcs_in_flight", 1, 512)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, value string
		want        int64 // -1: refused
	}{
		{"osc.a.max_dirty_mb", "1G", 1024},
		{"osc.a.max_dirty_mb", "1g", 1024},
		{"osc.a.max_dirty_mb", "512M", 512},
		{"osc.a.max_dirty_mb", " 512m ", 512},
		{"osc.a.max_dirty_mb", "2048K", 2},
		{"osc.a.max_dirty_mb", "1536K", 1}, // rounded down, as Lustre
		{"osc.a.max_dirty_mb", "100K", -1}, // under one MiB
		{"osc.a.max_dirty_mb", "2T", -1},   // 2097152 MiB: out of range
		{"osc.a.max_dirty_mb", "99999999999E", -1},
		{"osc.a.max_dirty_mb", "300", 300},
		{"osc.a.max_dirty_mb", "0x100", 256},
		{"osc.a.max_dirty_mb", "1X", -1},
		{"osc.a.max_dirty_mb", "G", -1},
		{"osc.a.max_dirty_mb", "-1G", -1},
		{"osd-file.b.direct_write_min_kb", "1M", 1024},
		{"osd-file.b.direct_write_min_kb", "64k", 64},
		{"osd-file.b.direct_write_min_kb", "0K", 0},
		{"osd-file.b.direct_write_min_kb", "512", 512},
		{"osc.a.max_rpcs_in_flight", "8", 8},
		{"osc.a.max_rpcs_in_flight", "1K", -1},
	} {
		delete(vals, tc.name)
		_, err := r.Set(SetOptions{}, Assignment{Pattern: tc.name, Value: tc.value})
		got, set := vals[tc.name]
		switch {
		case tc.want < 0 && err == nil:
			t.Errorf("%s=%s: set %d, want refused", tc.name, tc.value, got)
		case tc.want < 0 && !errors.Is(err, ErrBadValue):
			t.Errorf("%s=%s: %v, want a bad value", tc.name, tc.value, err)
		case tc.want >= 0 && err != nil:
			t.Errorf("%s=%s: %v", tc.name, tc.value, err)
		case tc.want >= 0 && (!set || got != tc.want):
			t.Errorf("%s=%s: set %d, want %d", tc.name, tc.value, got, tc.want)
		}
	}
}

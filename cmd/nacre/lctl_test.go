package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/ldlm"
)

// lctl runs the lctl command in this process and returns its output.
func lctl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newLctlCmd()
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = cmd.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// mustLctl runs lctl and fails the test if it fails.
func mustLctl(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := lctl(t, args...)
	if err != nil {
		t.Fatalf("lctl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// values parses get_param's name=value lines (single-line values).
func values(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// maxWritesInFlight reads get_param osc.*.rpc_stats and returns the most
// write RPCs any OSC had in flight (the last "rpcs in flight" bucket with
// writes).
func maxWritesInFlight(t *testing.T) int {
	t.Helper()
	out := mustLctl(t, "get_param", "osc.*.rpc_stats")
	most, in := 0, false
	bucket := regexp.MustCompile(`^(\d+):\s+(\d+)\s+\d+\s+\d+\s+\|\s+(\d+)\s+\d+\s+\d+$`)
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "rpcs in flight"):
			in = true
		case strings.HasPrefix(l, "osc."):
			in = false
		case in:
			if m := bucket.FindStringSubmatch(l); m != nil && m[3] != "0" {
				n, _ := strconv.Atoi(m[1])
				most = max(most, n)
			}
		}
	}
	return most
}

// writeFile writes n bytes to a new file through fs and flushes them.
func writeFile(t *testing.T, fs *client.FS, name string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, _, err := fs.Create(ctx, client.Root(), fs.Root(), name, uint64(syscall.O_CREAT|syscall.O_RDWR), 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	buf := bytes.Repeat([]byte(name[:1]), n)
	if _, _, err := f.WriteAt(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls get_param until check accepts its output.
func waitFor(t *testing.T, what string, check func(string) bool, args ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, err := lctl(t, append([]string{"get_param"}, args...)...)
		if err == nil && check(out) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened; last get_param %v: %v\n%s", what, args, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLctl runs lctl against a real cluster: the MDS and a mount in this
// process, the OSS in a child, each serving its parameters on a socket in
// the run directory.
func TestLctl(t *testing.T) {
	run := t.TempDir()
	t.Setenv(params.RunDirEnv, run)
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildOSS: true})
	fs := c.Mount(0)
	id := fs.Instance()
	osc0, osc1 := "osc.nacre-OST0000-osc-"+id, "osc.nacre-OST0001-osc-"+id

	t.Run("shapes", func(t *testing.T) {
		got := values(mustLctl(t, "get_param", "osc.*.max_rpcs_in_flight"))
		if len(got) != 2 || got[osc0+".max_rpcs_in_flight"] != "8" || got[osc1+".max_rpcs_in_flight"] != "8" {
			t.Fatalf("get_param osc.*.max_rpcs_in_flight: %v", got)
		}
		// Multi-line values: name=, then the lines, as Lustre prints stats.
		out := mustLctl(t, "get_param", "obdfilter.*.stats", "ost.OSS.ost_io.nrs_policies", "llite.*.max_cached_mb")
		for _, re := range []string{
			`(?m)^obdfilter\.nacre-OST0000\.stats=\nsnapshot_time +\d+\.\d{9} secs\.nsecs\nstart_time +\d+\.\d{9} secs\.nsecs\nelapsed_time +\d+\.\d{9} secs\.nsecs\n`,
			`(?m)^obdfilter\.nacre-OST0001\.stats=\n`,
			`(?m)^(statfs|connect|get_info|ost_statfs|create) +\d+ samples \[reqs\]$`,
			`(?m)^ost\.OSS\.ost_io\.nrs_policies=\n\nregular_requests:\n  - name: fifo\n    state: started\n`,
			`(?m)^llite\.nacre-` + id + `\.max_cached_mb=\nusers: 2\nmax_cached_mb: 512\nused_mb: \d+\n`,
		} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("get_param output lacks %s:\n%s", re, out)
			}
		}
		if out := mustLctl(t, "get_param", "-n", osc0+".max_dirty_mb"); out != "64\n" {
			t.Errorf("get_param -n: %q", out)
		}
		// The OSS's direct-I/O thresholds (in the child) and the mount's
		// per-file read-ahead window, read and changed at run time.
		for _, p := range []struct{ name, def, set string }{
			{"osd-file.nacre-OST0001.direct_write_min_kb", "0", "1024"},
			{"osd-file.nacre-OST0001.direct_read_min_kb", "0", "1024"},
			{"obdfilter.nacre-OST0001.sync_journal", "0", "1"},
			{"obdfilter.nacre-OST0001.degraded", "0", "1"},
			{"llite.nacre-" + id + ".max_read_ahead_per_file_mb", "32", "8"},
			{"mdc.nacre-MDT0000-mdc-" + id + ".max_rpcs_in_flight", "8", "2"},
		} {
			if out := mustLctl(t, "get_param", "-n", p.name); out != p.def+"\n" {
				t.Errorf("get_param -n %s: %q, want %s", p.name, out, p.def)
			}
			mustLctl(t, "set_param", p.name+"="+p.set)
			if out := mustLctl(t, "get_param", "-n", p.name); out != p.set+"\n" {
				t.Errorf("after set_param %s=%s: %q", p.name, p.set, out)
			}
			mustLctl(t, "set_param", p.name+"="+p.def)
		}
		if out := mustLctl(t, "get_param", "-N", "osc.*.max_dirty_mb"); out != osc0+".max_dirty_mb\n"+osc1+".max_dirty_mb\n" {
			t.Errorf("get_param -N: %q", out)
		}
		if out := mustLctl(t, "list_param", "osc.*"); out != osc0+"\n"+osc1+"\n" {
			t.Errorf("list_param osc.*: %q", out)
		}
		out = mustLctl(t, "list_param", "-R", "-F", "osc.*OST0000*")
		if !strings.Contains(out, osc0+".max_rpcs_in_flight=\n") || !strings.Contains(out, osc0+".stats\n") {
			t.Errorf("list_param -R -F:\n%s", out)
		}
		out = mustLctl(t, "get_param", "mdt.*.job_stats", "ldlm.namespaces.*.lru_size")
		if !strings.Contains(out, "mdt.nacre-MDT0000.job_stats=job_stats:\n") ||
			!strings.Contains(out, "ldlm.namespaces.nacre-MDT0000-mdc-"+id+".lru_size="+strconv.Itoa(ldlm.DefaultLRUSize)+"\n") {
			t.Errorf("get_param mdt, ldlm:\n%s", out)
		}
		// dl: the devices of both processes, numbered as one node's.
		out = mustLctl(t, "dl")
		line := regexp.MustCompile(`^ *\d+ (UP|IN) (osc|mdc|lov|lmv|mgc|mgs|obdfilter|ost|mds|mdt) \S+ \S+ \d+$`)
		types := map[string]int{}
		for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !line.MatchString(l) || !strings.HasPrefix(strings.TrimSpace(l), strconv.Itoa(i)+" ") {
				t.Errorf("dl line %d: %q", i, l)
			}
			types[strings.Fields(l)[2]]++
		}
		if types["osc"] != 2 || types["obdfilter"] != 2 || types["mdt"] != 1 || types["ost"] != 1 || types["mdc"] != 1 || types["lov"] != 1 {
			t.Errorf("dl: %v\n%s", types, out)
		}
	})

	t.Run("set_param changes behaviour", func(t *testing.T) {
		out := mustLctl(t, "set_param", "osc.*.max_rpcs_in_flight=1", "osc.*.max_pages_per_rpc=16")
		if !strings.Contains(out, osc0+".max_rpcs_in_flight=1\n") || !strings.Contains(out, osc1+".max_pages_per_rpc=16\n") {
			t.Fatalf("set_param prints what it set:\n%s", out)
		}
		mustLctl(t, "set_param", "-n", "osc.*.rpc_stats=clear")
		writeFile(t, fs, "a-one-in-flight", 8<<20)
		if m := maxWritesInFlight(t); m != 1 {
			t.Fatalf("max_rpcs_in_flight=1: rpc_stats shows %d write RPCs in flight", m)
		}
		mustLctl(t, "set_param", "osc.*.max_rpcs_in_flight=16", "osc.*.rpc_stats=0")
		m := 0
		for i := 0; i < 4 && m <= 1; i++ {
			writeFile(t, fs, fmt.Sprintf("b-sixteen-%d", i), 8<<20)
			m = maxWritesInFlight(t)
		}
		if m <= 1 || m > 16 {
			t.Fatalf("max_rpcs_in_flight=16: rpc_stats shows %d write RPCs in flight", m)
		}
		t.Logf("max_rpcs_in_flight=16: up to %d write RPCs in flight", m)
		out = mustLctl(t, "get_param", osc0+".rpc_stats")
		if !regexp.MustCompile(`(?s)^` + regexp.QuoteMeta(osc0) + `\.rpc_stats=\nsnapshot_time: +\d+\.\d+ \(secs\.nsecs\)\nread RPCs in flight: +\d+\nwrite RPCs in flight: +\d+\n.*pages per rpc +rpcs   % cum % \|       rpcs   % cum %\n1:\t\t.*rpcs in flight +rpcs`).MatchString(out) {
			t.Errorf("rpc_stats shape:\n%s", out)
		}
		mustLctl(t, "set_param", "osc.*.max_pages_per_rpc=1024")

		// checksum_type lists what the OST agreed to, the one in use in
		// brackets (the fastest here until one is named).
		if out := strings.TrimSpace(mustLctl(t, "get_param", "-n", osc0+".checksum_type")); out != "[crc32] crc32c" && out != "crc32 [crc32c]" {
			t.Errorf("checksum_type %q", out)
		}
		for _, c := range []struct{ set, show string }{{"crc32c", "crc32 [crc32c]"}, {"crc32", "[crc32] crc32c"}} {
			mustLctl(t, "set_param", "osc.*.checksum_type="+c.set)
			if out := strings.TrimSpace(mustLctl(t, "get_param", "-n", osc1+".checksum_type")); out != c.show {
				t.Errorf("after checksum_type=%s: %q, want %q", c.set, out, c.show)
			}
			writeFile(t, fs, "cksum-"+c.set, 1<<20)
		}
		if _, _, err := lctl(t, "set_param", "osc.*.checksum_type=adler"); err == nil {
			t.Error("checksum_type=adler accepted")
		}
	})

	t.Run("grant shrink", func(t *testing.T) {
		// cur_grant_bytes written lower gives the unused grant back (one
		// RPC's worth stays, 4M suffix as Lustre takes it); the OST's
		// granted total drops with it.
		writeFile(t, fs, "grant-shrink", 8<<20)
		granted := func() int64 {
			t.Helper()
			n, err := strconv.ParseInt(strings.TrimSpace(mustLctl(t, "get_param", "-n", "obdfilter.nacre-OST0000.tot_granted")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := granted()
		mustLctl(t, "set_param", osc0+".cur_grant_bytes=4M")
		if out := strings.TrimSpace(mustLctl(t, "get_param", "-n", osc0+".cur_grant_bytes")); out != strconv.Itoa(4<<20) {
			t.Errorf("cur_grant_bytes after setting 4M: %s", out)
		}
		if after := granted(); after >= before {
			t.Errorf("tot_granted %d after a shrink, %d before", after, before)
		}
		if out := mustLctl(t, "get_param", "-n", osc0+".stats"); !regexp.MustCompile(`(?m)^grant_shrink +[12] samples \[reqs\]$`).MatchString(out) {
			t.Errorf("osc stats after a shrink:\n%s", out)
		}
		if out := mustLctl(t, "get_param", "-n", "obdfilter.nacre-OST0000.stats"); !regexp.MustCompile(`(?m)^set_info +[12] samples \[reqs\]$`).MatchString(out) {
			t.Errorf("obdfilter stats after a shrink:\n%s", out)
		}
		if out := mustLctl(t, "get_param", osc0+".grant_shrink", osc0+".grant_shrink_interval"); out != osc0+".grant_shrink=1\n"+osc0+".grant_shrink_interval=1200\n" {
			t.Errorf("grant_shrink defaults:\n%s", out)
		}
		mustLctl(t, "set_param", "osc.*.grant_shrink=0", "osc.*.grant_shrink_interval=60")
		if out := mustLctl(t, "get_param", "-n", osc1+".grant_shrink", osc1+".grant_shrink_interval"); out != "0\n60\n" {
			t.Errorf("grant_shrink after setting: %q", out)
		}
		if _, _, err := lctl(t, "set_param", "osc.*.grant_shrink_interval=0"); err == nil {
			t.Error("grant_shrink_interval=0 accepted")
		}
		mustLctl(t, "set_param", "osc.*.grant_shrink=1", "osc.*.grant_shrink_interval=1200")
	})

	t.Run("default striping", func(t *testing.T) {
		// lod.*.stripecount and stripesize are the file system's default
		// layout: a new file where no directory says otherwise gets them.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		create := func(name string) layout.RAID0 {
			t.Helper()
			f, _, err := fs.Create(ctx, client.Root(), fs.Root(), name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close(ctx)
			if f.Layout() == nil || len(f.Layout().Components) != 1 {
				t.Fatalf("%s: layout %v", name, f.Layout())
			}
			return f.Layout().Components[0].RAID0
		}
		if r := create("lod-default"); r.StripeCount != 1 || r.StripeSize != 1<<20 {
			t.Fatalf("default striping: %+v", r)
		}
		mustLctl(t, "set_param", "lod.*.stripecount=2", "lod.*.stripesize=2097152")
		defer mustLctl(t, "set_param", "lod.*.stripecount=1", "lod.*.stripesize=1048576")
		if out := mustLctl(t, "get_param", "-n", "lod.nacre-MDT0000-mdtlov.stripecount"); out != "2\n" {
			t.Fatalf("get_param stripecount after setting 2: %q", out)
		}
		if r := create("lod-two"); r.StripeCount != 2 || r.StripeSize != 2<<20 {
			t.Fatalf("after lod.*.stripecount=2, stripesize=2M: %+v", r)
		}
		if _, _, err := lctl(t, "set_param", "lod.*.stripesize=1000"); err == nil {
			t.Fatal("stripesize=1000 (not a multiple of 64 KiB) accepted")
		}
		if r := create("lod-still-two"); r.StripeCount != 2 || r.StripeSize != 2<<20 {
			t.Fatalf("a refused stripesize changed the default: %+v", r)
		}
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		before := mustLctl(t, "get_param", "osc.*.max_rpcs_in_flight", "osc.*.max_dirty_mb", "ldlm.namespaces.*.lru_size")
		for _, tc := range []struct {
			args []string
			kind error
			want string
		}{
			{[]string{"set_param", "osc.*.nonesuch=1"}, params.ErrNoMatch, "set_param: osc.*.nonesuch: no parameter matches"},
			{[]string{"get_param", "mdc.nomatch*.import"}, params.ErrNoMatch, "get_param: mdc.nomatch*.import: no parameter matches"},
			{[]string{"list_param", "frobnicate"}, params.ErrNoMatch, "list_param: frobnicate: no parameter matches"},
			{[]string{"set_param", "osc.*.max_rpcs_in_flight=300"}, params.ErrBadValue, "max_rpcs_in_flight=300: bad value: 300 is out of range [1, 256]"},
			{[]string{"set_param", "osc.*.max_rpcs_in_flight=lots"}, params.ErrBadValue, "max_rpcs_in_flight=lots: bad value: want an integer from 1 to 256"},
			// The first assignment is fine, the second is not: neither is made.
			{[]string{"set_param", "osc.*.max_rpcs_in_flight=4", "osc.*.max_dirty_mb=2"}, params.ErrBadValue, "max_dirty_mb=2: bad value: osc: invalid config: max_dirty_mb 2 below one RPC"},
			{[]string{"set_param", "ldlm.namespaces.*.lru_size=7", "osc.*.stats=0"}, params.ErrReadOnly, "osc.nacre-OST0000-osc-" + id + ".stats: read-only parameter"},
			{[]string{"set_param", "ost.OSS.ost_io.nrs_policies=lifo"}, params.ErrBadValue, "nrs_policies=lifo: bad value: want one of fifo, tbf"},
			{[]string{"set_param", "osc.[.x=1"}, params.ErrBadName, "bad pattern"},
			{[]string{"set_param", "max_dirty_mb"}, params.ErrBadName, "want NAME=VALUE"},
		} {
			out, _, err := lctl(t, tc.args...)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("lctl %s: %v; want %v containing %q", strings.Join(tc.args, " "), err, tc.kind, tc.want)
			}
			if out != "" {
				t.Errorf("lctl %s printed %q", strings.Join(tc.args, " "), out)
			}
		}
		if after := mustLctl(t, "get_param", "osc.*.max_rpcs_in_flight", "osc.*.max_dirty_mb", "ldlm.namespaces.*.lru_size"); after != before {
			t.Fatalf("refused set_params changed something:\n%s\nbecame\n%s", before, after)
		}
		// A socket nobody serves (a process that died) is skipped.
		dead := filepath.Join(run, "999999999.sock")
		if err := os.WriteFile(dead, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(dead)
		mustLctl(t, "get_param", "osc.*.max_dirty_mb")
	})

	t.Run("admin API", func(t *testing.T) {
		// The MGS's process (this one) through its admin API: the same
		// registry as its socket, and the other processes' of the cluster.
		api := "--admin=" + c.MGS
		if got, want := mustLctl(t, api, "get_param", "osc.*.max_rpcs_in_flight"), mustLctl(t, "--socket", filepath.Join(run, strconv.Itoa(os.Getpid())+".sock"), "get_param", "osc.*.max_rpcs_in_flight"); got != want {
			t.Fatalf("admin API:\n%s\nsocket:\n%s", got, want)
		}
		if out := mustLctl(t, api, "set_param", "ldlm.namespaces.*.lru_size=100"); strings.Count(out, ".lru_size=100\n") != 3 {
			t.Fatalf("set_param through the admin API:\n%s", out)
		}
		if out := mustLctl(t, api, "list_param", "llite.*"); out != "llite.nacre-"+id+"\n" {
			t.Fatalf("list_param through the admin API: %q", out)
		}
		if _, _, err := lctl(t, api, "set_param", "osc.*.max_dirty_mb=0"); err == nil || !strings.Contains(err.Error(), "max_dirty_mb=0: bad value") {
			t.Fatalf("bad value through the admin API: %v", err)
		}
		// dl through the admin API is the cluster's: this process's MDT
		// and the OSS's OSTs, which another process serves.
		if out := mustLctl(t, api, "dl"); !strings.Contains(out, " UP mdt nacre-MDT0000 ") || !strings.Contains(out, " UP obdfilter nacre-OST0001 ") {
			t.Fatalf("dl through the admin API:\n%s", out)
		}
		mustLctl(t, "set_param", "ldlm.namespaces.*.lru_size=0")
	})

	t.Run("pools", func(t *testing.T) {
		if out := mustLctl(t, "pool_new", "nacre.flash"); out != "Pool nacre.flash created\n" {
			t.Errorf("pool_new: %q", out)
		}
		if out := mustLctl(t, "pool_add", "nacre.flash", "OST[0-1]"); out != "OST nacre-OST0000_UUID added to pool nacre.flash\nOST nacre-OST0001_UUID added to pool nacre.flash\n" {
			t.Errorf("pool_add: %q", out)
		}
		if out := mustLctl(t, "pool_remove", "nacre.flash", "nacre-OST0001"); out != "OST nacre-OST0001_UUID removed from pool nacre.flash\n" {
			t.Errorf("pool_remove: %q", out)
		}
		if out := mustLctl(t, "pool_list", "nacre.flash"); out != "Pool: nacre.flash\nnacre-OST0000_UUID\n" {
			t.Errorf("pool_list nacre.flash: %q", out)
		}
		if out := mustLctl(t, "pool_list", "nacre"); out != "Pools from nacre:\nnacre.flash\n" {
			t.Errorf("pool_list nacre: %q", out)
		}
		for _, bad := range [][]string{{"pool_new", "flash"}, {"pool_add", "nacre.flash", "OST[9-2]"}, {"pool_add", "nacre.flash", "other-OST0000"},
			{"pool_list", "nacre.nope"}, {"pool_destroy", "nacre.flash"}} {
			if out, _, err := lctl(t, bad...); err == nil {
				t.Errorf("lctl %v succeeded: %q", bad, out)
			}
		}
		mustLctl(t, "pool_remove", "nacre.flash", "0")
		if out := mustLctl(t, "pool_destroy", "nacre.flash"); out != "Pool nacre.flash destroyed\n" {
			t.Errorf("pool_destroy: %q", out)
		}
	})

	t.Run("changelog", func(t *testing.T) {
		if out := mustLctl(t, "changelog_register"); out != "nacre-MDT0000: Registered changelog userid 'cl1'\n" {
			t.Fatalf("changelog_register: %q", out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := fs.Mkdir(ctx, client.Root(), fs.Root(), "cl-dir", 0o755); err != nil {
			t.Fatal(err)
		}
		lfs := func(which int, args ...string) (string, error) {
			cmd := newLfsChangelogCmds()[which]
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			cmd.SetArgs(append(args, "--source", c.Source(), "--port", strconv.Itoa(c.Port)))
			err := cmd.ExecuteContext(ctx)
			return out.String(), err
		}
		out, err := lfs(0, "nacre-MDT0000")
		if err != nil || !regexp.MustCompile(`(?m)^\d+ 02MKDIR \d\d:\d\d:\d\d\.\d{9} \d{4}\.\d\d\.\d\d 0x0 u=0:0 t=\[0x[0-9a-f]+:0x[0-9a-f]+:0x0\] p=\[0x200000007:0x1:0x0\] cl-dir$`).MatchString(out) {
			t.Fatalf("lfs changelog: %v\n%s", err, out)
		}
		if _, err := lfs(1, "nacre-MDT0000", "cl1", "0"); err != nil {
			t.Fatalf("lfs changelog_clear: %v", err)
		}
		users := mustLctl(t, "get_param", "-n", "mdd.*.changelog_users")
		if !regexp.MustCompile(`(?m)^cl1 +[1-9]\d*$`).MatchString(users) {
			t.Fatalf("changelog_users after a clear:\n%s", users)
		}
		if _, err := lfs(1, "nacre-MDT0000", "cl7", "0"); err == nil {
			t.Fatal("changelog_clear of an unknown user succeeded")
		}
		if out, _, err := lctl(t, "changelog_deregister", "cl9"); err == nil {
			t.Fatalf("changelog_deregister of an unknown user: %q", out)
		}
		if out := mustLctl(t, "changelog_deregister", "cl1"); out != "nacre-MDT0000: Deregistered changelog user #1\n" {
			t.Fatalf("changelog_deregister: %q", out)
		}
	})

	t.Run("evict", func(t *testing.T) {
		nid := fs.NID().String()
		exports := mustLctl(t, "get_param", "-n", "obdfilter.nacre-OST0000.exports")
		if !strings.Contains(exports, " "+nid+" ") {
			t.Fatalf("exports of OST0000 lack %s:\n%s", nid, exports)
		}
		if out, _, err := lctl(t, "set_param", "obdfilter.nacre-OST0000.evict_client=nid:10.9.9.9@tcp"); err == nil {
			t.Fatalf("evicting a client that is not there: %q", out)
		}
		mustLctl(t, "set_param", "obdfilter.nacre-OST0000.evict_client=nid:"+nid)
		if exports := mustLctl(t, "get_param", "-n", "obdfilter.nacre-OST0000.exports"); strings.Contains(exports, " "+nid+" ") {
			t.Fatalf("the evicted client is still an export:\n%s", exports)
		}
		// The client's next request there learns of the eviction (it
		// fails, as Lustre's in-flight requests of an evicted client do);
		// it reconnects and the one after goes through.
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if _, err := fs.Statfs(sctx); err != nil && !errors.Is(err, ptlrpc.ErrEvicted) {
			t.Fatalf("statfs after the eviction: %v", err)
		}
		if _, err := fs.Statfs(sctx); err != nil {
			t.Fatalf("statfs after reconnecting: %v", err)
		}
		waitFor(t, "the client back on OST0000", func(out string) bool { return strings.Contains(out, " "+nid+" ") },
			"-n", "obdfilter.nacre-OST0000.exports")
	})

	t.Run("persistent", func(t *testing.T) {
		mgsFlag := "--mgs=" + c.MGS
		out := mustLctl(t, "set_param", "-P", mgsFlag, "osc.*.max_dirty_mb=32", "ldlm.namespaces.nacre-*.lru_size=200")
		if out != "*.*.osc.max_dirty_mb=32\nnacre.client.ldlm.lru_size=200\n" {
			t.Fatalf("set_param -P printed %q", out)
		}
		// Without --mgs, lctl asks this node's processes which MGS they use.
		if out := mustLctl(t, "conf_param", "nacre-OST0001.osc.max_pages_per_rpc=256"); out != "nacre.OST0001.osc.max_pages_per_rpc=256\n" {
			t.Fatalf("conf_param printed %q", out)
		}
		mustLctl(t, "set_param", "-P", mgsFlag, "ost.OSS.ost_io.nrs_policies=tbf nid")
		// Refused before anything is stored: a bad value, a name with no
		// persistent form.
		for _, args := range [][]string{
			{"set_param", "-P", mgsFlag, "osc.*.max_rpcs_in_flight=4", "osc.*.max_dirty_mb=0"},
			{"set_param", "-P", mgsFlag, "osc.*.stats=1"},
			{"conf_param", mgsFlag, "nacre-OST0001.osc.max_dirty=1"},
		} {
			if _, _, err := lctl(t, args...); err == nil {
				t.Errorf("lctl %v succeeded", args)
			}
		}
		// The mount and the servers apply them as the MGS reports them.
		waitFor(t, "the mount applies max_dirty_mb", func(s string) bool {
			v := values(s)
			return v[osc0+".max_dirty_mb"] == "32" && v[osc1+".max_dirty_mb"] == "32"
		}, "osc.*.max_dirty_mb")
		waitFor(t, "the OSS applies nrs_policies", func(s string) bool { return strings.Contains(s, "name: tbf nid\n    state: started") },
			"ost.OSS.ost_io.nrs_policies")
		if v := values(mustLctl(t, "get_param", osc0+".max_rpcs_in_flight")); v[osc0+".max_rpcs_in_flight"] != "16" {
			t.Fatalf("the refused -P changed max_rpcs_in_flight: %v", v)
		}

		// A new mount starts with them.
		fs2 := c.Mount(1)
		id2 := fs2.Instance()
		got := values(mustLctl(t, "get_param", "osc.*-"+id2+".max_dirty_mb", "osc.*-"+id2+".max_pages_per_rpc", "ldlm.namespaces.*-"+id2+".lru_size"))
		want := map[string]string{
			"osc.nacre-OST0000-osc-" + id2 + ".max_dirty_mb": "32", "osc.nacre-OST0001-osc-" + id2 + ".max_dirty_mb": "32",
			"osc.nacre-OST0000-osc-" + id2 + ".max_pages_per_rpc": "1024", "osc.nacre-OST0001-osc-" + id2 + ".max_pages_per_rpc": "256",
			"ldlm.namespaces.nacre-OST0000-osc-" + id2 + ".lru_size": "200", "ldlm.namespaces.nacre-MDT0000-mdc-" + id2 + ".lru_size": "200",
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("new mount: %s=%q, want %q (all: %v)", k, got[k], v, got)
			}
		}

		// A restarted OSS starts with its policy; the killed one's socket
		// is skipped.
		c.KillOSS()
		if err := c.StartOSS(); err != nil {
			t.Fatal(err)
		}
		if out := mustLctl(t, "get_param", "ost.OSS.ost_io.nrs_policies"); !strings.Contains(out, "name: tbf nid\n    state: started") {
			t.Fatalf("restarted OSS:\n%s", out)
		}

		// -d removes a stored parameter.
		if out := mustLctl(t, "set_param", "-P", "-d", mgsFlag, "ost.OSS.ost_io.nrs_policies"); out != "*.*.ost.nrs_policies deleted\n" {
			t.Fatalf("set_param -P -d printed %q", out)
		}
	})
}

// TestLctlBinaryUp: the binary, invoked as lctl, against `nacre up` (the
// MGS, the MDT and the OSTs in one process, serving its socket): set_param
// -P reaches the servers, and survives a restart of the whole cluster.
func TestLctlBinaryUp(t *testing.T) {
	run := t.TempDir()
	t.Setenv(params.RunDirEnv, run)
	lctlBin := filepath.Join(t.TempDir(), "lctl")
	if err := os.Symlink(nacreBin, lctlBin); err != nil {
		t.Fatal(err)
	}
	lctlExec := func(args ...string) (string, error) {
		t.Helper()
		var stderr strings.Builder
		cmd := exec.Command(lctlBin, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return string(out) + stderr.String(), err
	}
	data := t.TempDir()
	ports := [4]string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	p := startUp(t, data, ports, "--osts", "2")
	out, err := lctlExec("dl")
	if err != nil || !regexp.MustCompile(`(?m)^ +0 UP mgs MGS MGS 1$`).MatchString(out) || !strings.Contains(out, " UP obdfilter nacre-OST0001 ") {
		t.Fatalf("lctl dl: %v\n%s", err, out)
	}
	// -P needs the admin token; the MGS is found through the servers' mgc.
	if out, err := lctlExec("set_param", "-P", "ost.OSS.ost_io.nrs_policies=tbf jobid"); err == nil || !strings.Contains(out, "authentication required") {
		t.Fatalf("set_param -P without a token: %v\n%s", err, out)
	}
	tokenFile := filepath.Join(data, "admin.token")
	if out, err := lctlExec("set_param", "-P", "--token-file", tokenFile, "ost.OSS.ost_io.nrs_policies=tbf jobid"); err != nil || out != "*.*.ost.nrs_policies=tbf jobid\n" {
		t.Fatalf("set_param -P: %v\n%s", err, out)
	}
	started := func() bool {
		out, err := lctlExec("get_param", "-n", "ost.OSS.ost_io.nrs_policies")
		return err == nil && strings.Contains(out, "name: tbf jobid\n    state: started")
	}
	for deadline := time.Now().Add(30 * time.Second); !started(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the OSS never applied nrs_policies=tbf jobid")
		}
	}
	// The admin API reads the same registry.
	if out, err := lctlExec("--admin", ports[2], "--token-file", tokenFile, "get_param", "obdfilter.*.uuid"); err != nil || strings.Count(out, "obdfilter.nacre-OST000") != 2 {
		t.Fatalf("get_param --admin: %v\n%s", err, out)
	}
	p.stop(t)
	if socks, _ := params.Sockets(run); len(socks) != 0 {
		t.Fatalf("sockets left after nacre up stopped: %v", socks)
	}
	p = startUp(t, data, ports, "--osts", "2")
	if !started() {
		out, _ := lctlExec("get_param", "ost.OSS.ost_io.nrs_policies")
		t.Fatalf("after a restart of every server:\n%s", out)
	}

	// Killed and started again: the OSTs recorded one client, the MDS,
	// which comes back at once under the same uuid, so their recovery is
	// over in moments, not after its 90 s window.
	p.cmd.Process.Kill()
	<-p.done
	p = startUp(t, data, ports, "--osts", "2")
	recovered := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out, err := lctlExec("get_param", "-n", "obdfilter.*.recovery_status", "mdt.*.recovery_status")
			if err == nil && strings.Count(out, "status: COMPLETE\n") == 3 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the targets still recovering 20 s after %s: %v\n%s", what, err, out)
			}
		}
	}
	recovered("a crash with the MDS back")

	// Replay barriers, then a crash, then a start from the barriers'
	// copies: each target saved its store, and is put back as it was.
	if out, err := lctlExec("set_param", "mdt.*.replay_barrier=1", "obdfilter.*.replay_barrier=1"); err != nil || strings.Count(out, "replay_barrier=1") != 3 {
		t.Fatalf("set_param replay_barrier: %v\n%s", err, out)
	}
	saved := []string{filepath.Join(data, "mdt0", "replay_barrier"), filepath.Join(data, "ost0", "replay_barrier"), filepath.Join(data, "ost1", "replay_barrier")}
	for _, d := range saved {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("the barrier's copy: %v", err)
		}
	}
	p.cmd.Process.Kill()
	<-p.done
	startUp(t, data, ports, "--osts", "2", "--restore-replay-barrier")
	for _, d := range saved {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after a start with --restore-replay-barrier: %v (not put back)", d, err)
		}
	}
	recovered("a start from the replay barriers")
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/llite"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/internal/params"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
)

// lfs runs the lfs command in this process and returns its output.
func lfs(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newLfsCmd()
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = cmd.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// mustLfs runs lfs and fails the test if it fails.
func mustLfs(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := lfs(t, args...)
	if err != nil {
		t.Fatalf("lfs %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// fuseMount mounts the cluster through FUSE as client i (as nacre mount
// does) and unmounts it when the test ends.
func fuseMount(t *testing.T, c *clustertest.Cluster, i int) string {
	t.Helper()
	return fuseMountServer(t, c, i).Dir()
}

// fuseMountServer is fuseMount, returning the mount's server.
func fuseMountServer(t *testing.T, c *clustertest.Cluster, i int) *llite.Server {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("lfs tests need FUSE: %v", err)
	}
	dir, err := os.MkdirTemp("", "lfs-mnt-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := llite.Mount(ctx, dir, c.ClientConfig(i), llite.Options{FSName: c.Source(), AllowOther: true, Logger: clustertest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Unmount(ctx); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			srv.UnmountLazy()
			srv.Wait()
		}
	})
	return srv
}

// lovOf reads a file's layout through the mount.
func lovOf(t *testing.T, path string) layout.Layout {
	t.Helper()
	b, err := getxattr(path, client.XattrLOV)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	l, err := layout.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// objLines are the object table's lines of a plain layout, as Lustre
// prints them (group: the sequence, in hex past the reserved ones).
func objLines(l layout.Layout) string {
	var b strings.Builder
	b.WriteString("\tobdidx\t\t objid\t\t objid\t\t group\n")
	for _, o := range l.Components[0].Objects {
		fmt.Fprintf(&b, "\t%6d\t%14d\t%13s\t%14s\n", o.OSTIndex, o.Object.Oid, "0x"+strconv.FormatUint(uint64(o.Object.Oid), 16),
			"0x"+strconv.FormatUint(o.Object.Seq, 16))
	}
	return b.String()
}

func diff(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s:\n--- got ---\n%s--- want ---\n%s", what, got, want)
	}
}

// TestLfs runs lfs against a running cluster through a FUSE mount and
// compares its output with the shapes of Lustre's lfs.
func TestLfs(t *testing.T) {
	// A name of its own: lfs finds a file system given by name among the
	// host's mounts, and other tests mount "nacre" meanwhile.
	c := clustertest.Start(t, clustertest.Options{OSTs: 4, FSName: "lfst"})
	mnt := fuseMount(t, c, 0)
	lib := c.Mount(1) // a second client, to check what lfs did
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("setstripe and getstripe of a plain file", func(t *testing.T) {
		f := filepath.Join(mnt, "plain")
		mustLfs(t, "setstripe", "-c", "2", "-S", "1M", "-i", "1", f)
		l := lovOf(t, f)
		if objs := l.Components[0].Objects; len(objs) != 2 || objs[0].OSTIndex != 1 || objs[1].OSTIndex != 2 {
			t.Fatalf("layout: %v", l)
		}
		diff(t, "getstripe", mustLfs(t, "getstripe", f), f+"\n"+
			"lmm_stripe_count:  2\n"+
			"lmm_stripe_size:   1048576\n"+
			"lmm_pattern:       raid0\n"+
			"lmm_layout_gen:    0\n"+
			"lmm_stripe_offset: 1\n"+
			objLines(l)+"\n")
		fidb, _ := getxattr(f, client.XattrFID)
		fid := string(fidb)
		var seq, oid uint64
		fmt.Sscanf(fid, "[0x%x:0x%x:", &seq, &oid)
		diff(t, "getstripe -v", mustLfs(t, "getstripe", "-v", f), f+"\n"+
			"lmm_magic:         0x0BD10BD0\n"+
			fmt.Sprintf("lmm_seq:           %#x\n", seq)+
			fmt.Sprintf("lmm_object_id:     %#x\n", oid)+
			"lmm_fid:           "+fid+"\n"+
			"lmm_stripe_count:  2\n"+
			"lmm_stripe_size:   1048576\n"+
			"lmm_pattern:       raid0\n"+
			"lmm_layout_gen:    0\n"+
			"lmm_stripe_offset: 1\n"+
			objLines(l)+"\n")
		diff(t, "getstripe -c", mustLfs(t, "getstripe", "-c", f), "2\n\n")
		diff(t, "getstripe -S", mustLfs(t, "getstripe", "-S", f), "1048576\n\n")
		diff(t, "getstripe -i", mustLfs(t, "getstripe", "-i", f), "1\n\n")
		diff(t, "getstripe -c -S", mustLfs(t, "getstripe", "-c", "-S", f), "lmm_stripe_count:  2\nlmm_stripe_size:   1048576\n\n")
		var y strings.Builder
		y.WriteString("lmm_stripe_count:  2\nlmm_stripe_size:   1048576\nlmm_pattern:       raid0\nlmm_layout_gen:    0\nlmm_stripe_offset: 1\nlmm_objects:\n")
		for _, o := range l.Components[0].Objects {
			fmt.Fprintf(&y, "      - l_ost_idx: %d\n        l_fid:     0x%x:0x%x:0x%x\n", o.OSTIndex, o.Object.Seq, o.Object.Oid, o.Object.Ver)
		}
		y.WriteString("\n")
		diff(t, "getstripe -y", mustLfs(t, "getstripe", "-y", f), y.String())
		// A file that exists keeps its layout.
		if _, _, err := lfs(t, "setstripe", "-c", "4", f); err == nil || !strings.Contains(err.Error(), "stripe already set") {
			t.Fatalf("setstripe of an existing file: %v", err)
		}
		// The file works: data written through the mount read back by
		// another client.
		data := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got := readLib(t, ctx, lib, "plain")
		if !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes, wrote %d", len(got), len(data))
		}
	})

	t.Run("PFL round trip", func(t *testing.T) {
		f := filepath.Join(mnt, "pfl")
		mustLfs(t, "setstripe", "-E", "1M", "-c", "1", "-E", "64M", "-c", "2", "-E", "-1", "-c", "4", f)
		l := lovOf(t, f)
		first := l.Components[0].Objects
		if !l.Composite || len(l.Components) != 3 || len(first) != 1 || l.Components[1].Instantiated() {
			t.Fatalf("layout: %v", l)
		}
		uninit := func(id, start int, end string, count int) string {
			return fmt.Sprintf("    lcme_id:             %d\n"+
				"    lcme_mirror_id:      0\n"+
				"    lcme_flags:          0\n"+
				"    lcme_extent.e_start: %d\n"+
				"    lcme_extent.e_end:   %s\n"+
				"      lmm_stripe_count:  %d\n"+
				"      lmm_stripe_size:   1048576\n"+
				"      lmm_pattern:       raid0\n"+
				"      lmm_layout_gen:    0\n"+
				"      lmm_stripe_offset: -1\n\n", id, start, end, count)
		}
		initComp := func(id, start int, end string, c layout.Component) string {
			s := fmt.Sprintf("    lcme_id:             %d\n"+
				"    lcme_mirror_id:      0\n"+
				"    lcme_flags:          init\n"+
				"    lcme_extent.e_start: %d\n"+
				"    lcme_extent.e_end:   %s\n"+
				"      lmm_stripe_count:  %d\n"+
				"      lmm_stripe_size:   1048576\n"+
				"      lmm_pattern:       raid0\n"+
				"      lmm_layout_gen:    0\n"+
				"      lmm_stripe_offset: %d\n"+
				"      lmm_objects:\n", id, start, end, len(c.Objects), c.Objects[0].OSTIndex)
			for i, o := range c.Objects {
				s += fmt.Sprintf("      - %d: { l_ost_idx: %d, l_fid: [0x%x:0x%x:0x%x] }\n", i, o.OSTIndex, o.Object.Seq, o.Object.Oid, o.Object.Ver)
			}
			return s + "\n"
		}
		header := func(gen uint32) string {
			return f + "\n" + fmt.Sprintf("  lcm_layout_gen:    %d\n", gen) + "  lcm_mirror_count:  1\n" + "  lcm_entry_count:   3\n"
		}
		diff(t, "getstripe of a new PFL file", mustLfs(t, "getstripe", f), header(l.Gen)+
			initComp(1, 0, "1048576", l.Components[0])+
			uninit(2, 1<<20, "67108864", 2)+
			uninit(3, 64<<20, "EOF", 4))
		// A write at 2 MiB instantiates the second component.
		fd, err := os.OpenFile(f, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fd.WriteAt([]byte("x"), 2<<20); err != nil {
			t.Fatal(err)
		}
		fd.Close()
		l = lovOf(t, f)
		if !l.Components[1].Instantiated() || l.Components[2].Instantiated() {
			t.Fatalf("after a write at 2 MiB: %v", l)
		}
		diff(t, "getstripe after the write", mustLfs(t, "getstripe", f), header(l.Gen)+
			initComp(1, 0, "1048576", l.Components[0])+
			initComp(2, 1<<20, "67108864", l.Components[1])+
			uninit(3, 64<<20, "EOF", 4))
		// -c shows the last instantiated component's; -I one component.
		diff(t, "getstripe -c", mustLfs(t, "getstripe", "-c", f), "2\n\n")
		out := mustLfs(t, "getstripe", "-I", "3", f)
		diff(t, "getstripe -I 3", out, header(l.Gen)+uninit(3, 64<<20, "EOF", 4))
		// getstripe -y, then setstripe --yaml: the same template.
		tmpl := filepath.Join(t.TempDir(), "pfl.yaml")
		y := mustLfs(t, "getstripe", "-y", f)
		if !strings.HasPrefix(y, "  lcm_layout_gen:    ") || !strings.Contains(y, "  component2:\n    lcme_id:             3\n") ||
			!strings.Contains(y, "    sub_layout:\n      lmm_stripe_count:  4\n") {
			t.Fatalf("getstripe -y:\n%s", y)
		}
		os.WriteFile(tmpl, []byte(y), 0o644)
		g := filepath.Join(mnt, "pfl-copy")
		mustLfs(t, "setstripe", "--yaml", tmpl, g)
		c := lovOf(t, g)
		for i := range 3 {
			a, b := c.Components[i], l.Components[i]
			if a.Start != b.Start || a.End != b.End || a.StripeSize != b.StripeSize || (i == 2 && a.StripeCount != b.StripeCount) {
				t.Fatalf("component %d: %v, from %v", i, a, b)
			}
		}
	})

	t.Run("directory defaults", func(t *testing.T) {
		d := filepath.Join(mnt, "dir")
		os.Mkdir(d, 0o755)
		diff(t, "getstripe -d of a directory without a default", mustLfs(t, "getstripe", "-d", d),
			"stripe_count:  1 stripe_size:   1048576 pattern:       raid0 stripe_offset: -1\n\n")
		mustLfs(t, "setstripe", "-c", "2", d)
		diff(t, "getstripe -d", mustLfs(t, "getstripe", "-d", d),
			"stripe_count:  2 stripe_size:   1048576 pattern:       raid0 stripe_offset: -1\n\n")
		if err := os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		fl := lovOf(t, filepath.Join(d, "f"))
		diff(t, "getstripe of a directory and its file", mustLfs(t, "getstripe", d), d+"\n"+
			"stripe_count:  2 stripe_size:   1048576 pattern:       raid0 stripe_offset: -1\n\n"+
			d+"/f\n"+
			"lmm_stripe_count:  2\n"+
			"lmm_stripe_size:   1048576\n"+
			"lmm_pattern:       raid0\n"+
			"lmm_layout_gen:    0\n"+
			fmt.Sprintf("lmm_stripe_offset: %d\n", fl.Components[0].Objects[0].OSTIndex)+
			objLines(fl)+"\n")
		mustLfs(t, "setstripe", "-d", d)
		diff(t, "getstripe -d after setstripe -d", mustLfs(t, "getstripe", "-d", d),
			"stripe_count:  1 stripe_size:   1048576 pattern:       raid0 stripe_offset: -1\n\n")
		// A composite default.
		mustLfs(t, "setstripe", "-E", "4M", "-c", "1", "-E", "-1", "-c", "-1", "-S", "4M", d)
		diff(t, "getstripe -d of a PFL default", mustLfs(t, "getstripe", "-d", d),
			"  lcm_layout_gen:    0\n"+
				"  lcm_mirror_count:  1\n"+
				"  lcm_entry_count:   2\n"+
				"    lcme_id:             N/A\n"+
				"    lcme_mirror_id:      N/A\n"+
				"    lcme_flags:          0\n"+
				"    lcme_extent.e_start: 0\n"+
				"    lcme_extent.e_end:   4194304\n"+
				"      stripe_count:  1       stripe_size:   1048576       pattern:       raid0       stripe_offset: -1\n\n"+
				"    lcme_id:             N/A\n"+
				"    lcme_mirror_id:      N/A\n"+
				"    lcme_flags:          0\n"+
				"    lcme_extent.e_start: 4194304\n"+
				"    lcme_extent.e_end:   EOF\n"+
				"      stripe_count:  -1       stripe_size:   4194304       pattern:       raid0       stripe_offset: -1\n\n")
		if err := os.WriteFile(filepath.Join(d, "g"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if g := lovOf(t, filepath.Join(d, "g")); !g.Composite || len(g.Components) != 2 {
			t.Fatalf("a file in a PFL directory: %v", g)
		}
	})

	t.Run("df", func(t *testing.T) {
		out := mustLfs(t, "df", mnt)
		lines := strings.Split(out, "\n")
		diff(t, "df header", lines[0]+"\n", "UUID                   1K-blocks        Used   Available Use% Mounted on\n")
		row := func(uuid, at string) *regexp.Regexp {
			return regexp.MustCompile(`^` + regexp.QuoteMeta(fmt.Sprintf("%-20s", uuid)) + ` {1,}(\d+) {1,}(\d+) {1,}(\d+) +\d+% ` + regexp.QuoteMeta(mnt+at) + `$`)
		}
		want := []*regexp.Regexp{row("lfst-MDT0000_UUID", "[MDT:0]")}
		for i := range 4 {
			want = append(want, row(fmt.Sprintf("lfst-OST%04x_UUID", i), fmt.Sprintf("[OST:%d]", i)))
		}
		var total uint64
		for i, re := range want {
			m := re.FindStringSubmatch(lines[1+i])
			if m == nil {
				t.Fatalf("df line %d: %q, want %s\n%s", 1+i, lines[1+i], re, out)
			}
			if i > 0 {
				n, _ := strconv.ParseUint(m[1], 10, 64)
				total += n
			}
		}
		if lines[6] != "" || lines[8] != "" || len(lines) != 10 {
			t.Fatalf("df: blank lines around the summary:\n%s", out)
		}
		m := row("filesystem_summary:", "").FindStringSubmatch(lines[7])
		if m == nil || m[1] != strconv.FormatUint(total, 10) {
			t.Fatalf("df summary %q: want the OSTs' %d 1K-blocks", lines[7], total)
		}
		out = mustLfs(t, "df", "-i", mnt)
		if !strings.HasPrefix(out, "UUID                      Inodes       IUsed       IFree IUse% Mounted on\n") ||
			!regexp.MustCompile(`(?m)^lfst-MDT0000_UUID +\d+ +\d+ +\d+ +\d+% `+regexp.QuoteMeta(mnt)+`\[MDT:0\]$`).MatchString(out) {
			t.Fatalf("df -i:\n%s", out)
		}
		out = mustLfs(t, "df", "-h", mnt)
		if !strings.HasPrefix(out, "UUID                       bytes        Used   Available Use% Mounted on\n") ||
			!regexp.MustCompile(`(?m)^lfst-OST0000_UUID +\d+\.\d[KMGTP] +\d+\.\d[KMGTP] +\d+\.\d[KMGTP] +\d+% `+regexp.QuoteMeta(mnt)+`\[OST:0\]$`).MatchString(out) {
			t.Fatalf("df -h:\n%s", out)
		}
	})

	t.Run("fids, names, targets", func(t *testing.T) {
		f := filepath.Join(mnt, "dir", "f")
		a, err := lib.Lookup(ctx, client.Root(), lib.Root(), "dir")
		if err != nil {
			t.Fatal(err)
		}
		fa, err := lib.Lookup(ctx, client.Root(), a.FID, "f")
		if err != nil {
			t.Fatal(err)
		}
		diff(t, "path2fid", mustLfs(t, "path2fid", f), fa.FID.String()+"\n")
		diff(t, "path2fid --parents", mustLfs(t, "path2fid", "--parents", f), a.FID.String()+"/f\n")
		diff(t, "fid2path", mustLfs(t, "fid2path", mnt, fa.FID.String()), f+"\n")
		diff(t, "fid2path by file system name", mustLfs(t, "fid2path", "lfst", fa.FID.String()), "dir/f\n")
		out := mustLfs(t, "getname", mnt)
		if !regexp.MustCompile(`^lfst-ffff[0-9a-f]{12} ` + regexp.QuoteMeta(mnt) + "\n$").MatchString(out) {
			t.Fatalf("getname: %q", out)
		}
		diff(t, "getname -n", mustLfs(t, "getname", "-n", mnt), "lfst "+mnt+"\n")
		diff(t, "osts", mustLfs(t, "osts", mnt), "OBDS:\n0: lfst-OST0000_UUID ACTIVE\n1: lfst-OST0001_UUID ACTIVE\n"+
			"2: lfst-OST0002_UUID ACTIVE\n3: lfst-OST0003_UUID ACTIVE\n")
		diff(t, "mdts", mustLfs(t, "mdts", mnt), "MDTS:\n0: lfst-MDT0000_UUID ACTIVE\n")
		diff(t, "getstripe -m", mustLfs(t, "getstripe", "-m", f), "0\n")
	})

	t.Run("mkdir and data_version", func(t *testing.T) {
		d := filepath.Join(mnt, "made")
		mustLfs(t, "mkdir", "-i", "0", "-c", "1", d)
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			t.Fatalf("lfs mkdir: %v", err)
		}
		if _, _, err := lfs(t, "mkdir", "-i", "1", d+"2"); err == nil || !strings.Contains(err.Error(), "one MDT") {
			t.Fatalf("lfs mkdir -i 1: %v", err)
		}
		f := filepath.Join(d, "v")
		os.WriteFile(f, []byte("one"), 0o644)
		v1, _ := strconv.Atoi(strings.TrimSpace(mustLfs(t, "data_version", f)))
		os.WriteFile(f, []byte("two"), 0o644)
		v2, _ := strconv.Atoi(strings.TrimSpace(mustLfs(t, "data_version", f)))
		if v2 <= v1 {
			t.Fatalf("data_version %d then %d after a write", v1, v2)
		}
	})

	t.Run("pools", func(t *testing.T) {
		conn, err := grpc.NewClient(c.MGS, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		admin := adminv1.NewAdminClient(conn)
		if _, err := admin.CreatePool(ctx, &adminv1.CreatePoolRequest{Fsname: "lfst", Name: "fast"}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.AddToPool(ctx, &adminv1.AddToPoolRequest{Fsname: "lfst", Name: "fast", Osts: []uint32{2, 3}}); err != nil {
			t.Fatal(err)
		}
		diff(t, "pool_list", mustLfs(t, "pool_list", "lfst"), "Pools from lfst:\nlfst.fast\n")
		diff(t, "pool_list of a path", mustLfs(t, "pool_list", mnt), "Pools from lfst:\nlfst.fast\n")
		diff(t, "pool_list of a pool", mustLfs(t, "pool_list", "lfst.fast"), "Pool: lfst.fast\nlfst-OST0002_UUID\nlfst-OST0003_UUID\n")
		f := filepath.Join(mnt, "pooled")
		mustLfs(t, "setstripe", "-p", "fast", "-c", "2", f)
		if out := mustLfs(t, "getstripe", "-p", f); out != "fast\n\n" {
			t.Fatalf("getstripe -p: %q", out)
		}
		if out := mustLfs(t, "getstripe", f); !strings.Contains(out, "lmm_stripe_offset: ") || !strings.Contains(out, "\nlmm_pool:          fast\n") {
			t.Fatalf("getstripe of a pooled file:\n%s", out)
		}
		out := mustLfs(t, "df", "-p", "lfst.fast", mnt)
		if strings.Contains(out, "OST0000") || !strings.Contains(out, "lfst-OST0002_UUID") || !strings.Contains(out, "lfst-OST0003_UUID") {
			t.Fatalf("df -p:\n%s", out)
		}
	})

	t.Run("find", func(t *testing.T) {
		top := filepath.Join(mnt, "tree")
		os.Mkdir(top, 0o755)
		mustLfs(t, "setstripe", "-c", "1", "-i", "0", filepath.Join(top, "one.dat"))
		mustLfs(t, "setstripe", "-c", "2", "-i", "1", filepath.Join(top, "two.dat"))
		os.Mkdir(filepath.Join(top, "sub"), 0o755)
		mustLfs(t, "setstripe", "-c", "4", filepath.Join(top, "sub", "four.log"))
		mustLfs(t, "setstripe", "-p", "fast", filepath.Join(top, "sub", "pool.log"))
		os.WriteFile(filepath.Join(top, "two.dat"), bytes.Repeat([]byte("z"), 3<<20), 0o644)
		os.Symlink("one.dat", filepath.Join(top, "link"))
		old := time.Now().Add(-10 * 24 * time.Hour)
		os.Chtimes(filepath.Join(top, "one.dat"), old, old)
		os.Chown(filepath.Join(top, "sub", "four.log"), 1234, 1234)
		find := func(args ...string) []string {
			t.Helper()
			out := mustLfs(t, append([]string{"find", top}, args...)...)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if l != "" {
					got = append(got, strings.TrimPrefix(l, top))
				}
			}
			return got
		}
		// What the OSTs are asked for a file's size: a glimpse (an
		// extent lock enqueue), its attributes, its data.
		ostReqs := func() uint64 { return ostOps(c, wire.LDLMEnqueue, wire.OSTGetattr, wire.OSTRead) }
		n0 := ostReqs()
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{nil, []string{"", "/link", "/one.dat", "/sub", "/sub/four.log", "/sub/pool.log", "/two.dat"}},
			{[]string{"-type", "f"}, []string{"/one.dat", "/sub/four.log", "/sub/pool.log", "/two.dat"}},
			{[]string{"-type", "d"}, []string{"", "/sub"}},
			{[]string{"--type", "l"}, []string{"/link"}},
			{[]string{"-name", "*.log"}, []string{"/sub/four.log", "/sub/pool.log"}},
			{[]string{"!", "-name", "*.log", "-type", "f"}, []string{"/one.dat", "/two.dat"}},
			{[]string{"-stripe-count", "2"}, []string{"/two.dat"}},
			{[]string{"--stripe-count", "+1", "-type", "f"}, []string{"/sub/four.log", "/two.dat"}},
			{[]string{"-ost", "0"}, []string{"/one.dat", "/sub/four.log"}},
			{[]string{"-pool", "fast"}, []string{"/sub/pool.log"}},
			{[]string{"-size", "+1M", "-lazy"}, []string{"/two.dat"}},
			{[]string{"-type", "f", "-mtime", "+5"}, []string{"/one.dat"}},
			{[]string{"-uid", "1234"}, []string{"/sub/four.log"}},
			{[]string{"-maxdepth", "1", "-type", "f"}, []string{"/one.dat", "/two.dat"}},
		} {
			got := find(tc.args...)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("find %s: %q, want %q", strings.Join(tc.args, " "), got, tc.want)
			}
		}
		if n := ostReqs(); n != n0 {
			t.Errorf("find asked the OSTs %d times for what the MDT knows", n-n0)
		}
		// Without -lazy, the size comes from the OSTs (for the files
		// every other test accepts only).
		if got := find("-size", "+1M"); !slices.Equal(got, []string{"/two.dat"}) {
			t.Errorf("find -size +1M: %q", got)
		}
		if n := ostReqs(); n == n0 {
			t.Errorf("find -size without -lazy asked no OST")
		}
	})

	t.Run("the lfs binary", func(t *testing.T) {
		// nacre run as lfs (a symlink), in a process of its own.
		bin := filepath.Join(t.TempDir(), "lfs")
		if err := os.Symlink(nacreBin, bin); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(mnt, "from-the-binary")
		if out, err := exec.Command(bin, "setstripe", "-c", "3", f).CombinedOutput(); err != nil {
			t.Fatalf("lfs setstripe: %v\n%s", err, out)
		}
		out, err := exec.Command(bin, "getstripe", "-c", f).CombinedOutput()
		if err != nil || string(out) != "3\n\n" {
			t.Fatalf("lfs getstripe -c: %q %v", out, err)
		}
		out, err = exec.Command(bin, "setstripe", "-c", "3", f).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "stripe already set") {
			t.Fatalf("lfs setstripe of an existing file: %q %v", out, err)
		}
	})

	t.Run("migrate under a writer", func(t *testing.T) {
		// Another client has the file open for write, with what it wrote
		// still in its cache. Had the swap gone through, the copy's unlink
		// would have destroyed the old objects with those pages (DISCARD
		// DATA): migrate must refuse while it is open for write, and go
		// through once the writer closed it, every byte there.
		f := filepath.Join(mnt, "written")
		mustLfs(t, "setstripe", "-c", "1", "-i", "1", f)
		data := make([]byte, 3<<20)
		r := rand.New(rand.NewPCG(3, 4))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		if err := os.WriteFile(f, data, 0o640); err != nil {
			t.Fatal(err)
		}
		a, err := lib.Lookup(ctx, client.Root(), lib.Root(), "written")
		if err != nil {
			t.Fatal(err)
		}
		w, _, err := lib.Open(ctx, client.Root(), a.FID, uint64(os.O_WRONLY))
		if err != nil {
			t.Fatal(err)
		}
		write := func(off int64, n int) {
			t.Helper()
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			if _, _, err := w.WriteAt(ctx, p, off); err != nil {
				t.Fatal(err)
			}
			copy(data[off:], p)
		}
		write(1<<20+123, 64<<10)
		_, stderr, err := lfs(t, "migrate", "-c", "4", "-S", "1M", f)
		if err == nil || !strings.Contains(stderr, "open for write") {
			t.Fatalf("migrate of a file open for write: %v %q, want a refusal", err, stderr)
		}
		if n := len(lovOf(t, f).Components[0].Objects); n != 1 {
			t.Fatalf("a refused migrate left %d stripes", n)
		}
		// The race lfs migrate has no hold on: the writer writes after
		// the data version was taken and the copy made, before the swap.
		// Before the MDT refused, the swap went through, the copy's unlink
		// destroyed the old objects, and the writer's close reported
		// nothing of the bytes it lost.
		dv, err := getxattr(f, client.XattrDataVersion)
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(mnt, "written-copy")
		mustLfs(t, "setstripe", "-c", "4", tmp)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		tmpFID, err := getxattr(tmp, client.XattrFID)
		if err != nil {
			t.Fatal(err)
		}
		write(2<<20+7, 100<<10)
		err = unix.Setxattr(f, client.XattrSwapLayouts, []byte(string(tmpFID)+" "+string(dv)), 0)
		if !errors.Is(err, unix.EBUSY) {
			t.Fatalf("swap of a file open for write: %v, want EBUSY", err)
		}
		if err := os.Remove(tmp); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatalf("the writer's close: %v", err)
		}
		mustLfs(t, "migrate", "-c", "4", "-S", "1M", f)
		if n := len(lovOf(t, f).Components[0].Objects); n != 4 {
			t.Fatalf("after migrate -c 4: %d stripes", n)
		}
		got, err := os.ReadFile(f)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("after migrate: %d bytes (%v), first difference at %d", len(got), err, firstDiff(got, data))
		}
	})

	t.Run("migrate under a reader", func(t *testing.T) {
		f := filepath.Join(mnt, "migrating")
		mustLfs(t, "setstripe", "-c", "1", "-i", "0", f)
		data := make([]byte, 24<<20)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		if err := os.WriteFile(f, data, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(f, "user.tag", []byte("kept"), 0); err != nil {
			t.Fatal(err)
		}
		before, _ := getxattr(f, client.XattrFID)
		link := filepath.Join(mnt, "migrating-link")
		if err := os.Link(f, link); err != nil {
			t.Fatal(err)
		}
		var st0 unix.Stat_t
		unix.Stat(f, &st0)
		// The reader is another process: it opens the file and reads 64
		// KiB; told to go on, it reads 5 MiB more while lfs migrates the
		// file; told again, the rest. Before that last part the kernel's
		// cache of the file is dropped: those reads go to the OSTs, to the
		// new objects (the layout swap called the reader's layout lock
		// back), and must give the same bytes.
		out := filepath.Join(t.TempDir(), "read")
		script := `exec 3<"$1"; dd bs=65536 count=1 <&3 >"$2" 2>/dev/null; echo opened; read go; ` +
			`i=0; while [ $i -lt 20 ]; do dd bs=262144 count=1 <&3 >>"$2" 2>/dev/null; sleep 0.01; i=$((i+1)); done; ` +
			`echo half; read go; cat <&3 >>"$2"; echo done`
		reader := exec.Command("sh", "-c", script, "sh", f, out)
		in, _ := reader.StdinPipe()
		stdout, _ := reader.StdoutPipe()
		reader.Stderr = os.Stderr
		if err := reader.Start(); err != nil {
			t.Fatal(err)
		}
		defer reader.Process.Kill()
		lines := bufio.NewReader(stdout)
		expect := func(want string) {
			t.Helper()
			if l, err := lines.ReadString('\n'); err != nil || l != want+"\n" {
				t.Fatalf("reader: %q %v, want %q", l, err, want)
			}
		}
		expect("opened")
		old, err := unix.Open(f, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(old)
		io.WriteString(in, "go\n")
		mustLfs(t, "migrate", "-c", "4", "-S", "1M", f)
		expect("half")
		// Drop what the mount caches of the old file: the kernel's pages,
		// and the library's (an 8 MiB cache keeps at most 8 MiB of it).
		if err := unix.Fadvise(old, 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		for _, a := range []params.Assignment{{Pattern: "llite.*.max_read_ahead_mb", Value: "0"}, {Pattern: "llite.*.max_cached_mb", Value: "8"}} {
			if _, err := params.Default.Set(params.SetOptions{}, a); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			params.Default.Set(params.SetOptions{}, params.Assignment{Pattern: "llite.*.max_cached_mb", Value: "512"})
			params.Default.Set(params.SetOptions{}, params.Assignment{Pattern: "llite.*.max_read_ahead_mb", Value: "64"})
		}()
		reads := ostOps(c, wire.OSTRead)
		io.WriteString(in, "go\n")
		expect("done")
		reader.Wait()
		if ostOps(c, wire.OSTRead) == reads {
			t.Fatalf("the reader's last reads asked no OST: the test did not read the old objects")
		}
		got, _ := os.ReadFile(out)
		if !bytes.Equal(got, data) {
			t.Fatalf("the reader read %d bytes, not the file's %d (first difference at %d)", len(got), len(data), firstDiff(got, data))
		}
		// The file has the new layout, its data, mode, times and xattrs.
		l := lovOf(t, f)
		if n := len(l.Components[0].Objects); n != 4 {
			t.Fatalf("after migrate -c 4: %d stripes", n)
		}
		now, _ := os.ReadFile(f)
		if !bytes.Equal(now, data) {
			t.Fatalf("after migrate: %d bytes, first difference at %d", len(now), firstDiff(now, data))
		}
		var st unix.Stat_t
		unix.Stat(f, &st)
		if st.Mode != st0.Mode || st.Mtim != st0.Mtim || st.Size != st0.Size {
			t.Fatalf("after migrate: mode %o mtime %v size %d, was %o %v %d", st.Mode, st.Mtim, st.Size, st0.Mode, st0.Mtim, st0.Size)
		}
		if v, err := getxattr(f, "user.tag"); err != nil || string(v) != "kept" {
			t.Fatalf("user.tag after migrate: %q %v", v, err)
		}
		after, _ := getxattr(f, client.XattrFID)
		if string(after) != string(before) {
			t.Fatalf("migrate changed the FID: %s → %s", before, after)
		}
		if viaLink, _ := getxattr(link, client.XattrFID); string(viaLink) != string(before) {
			t.Fatalf("the hard link names %s, the file %s", viaLink, before)
		}
		if n := len(lovOf(t, link).Components[0].Objects); n != 4 {
			t.Fatalf("the hard link sees %d stripes", n)
		}
		ents, _ := os.ReadDir(mnt)
		for _, e := range ents {
			if strings.Contains(e.Name(), "lfs-migrate") {
				t.Fatalf("migrate left %s behind", e.Name())
			}
		}
	})
}

// ostOps counts the requests of the given kinds the cluster's OSTs
// served.
func ostOps(c *clustertest.Cluster, ops ...wire.Opcode) uint64 {
	var n uint64
	for _, s := range c.Servers() {
		if s.OSS == nil {
			continue
		}
		for _, o := range s.OSS.OSTs() {
			st := o.Stats().Ops
			for _, op := range ops {
				n += st[op]
			}
		}
	}
	return n
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// readLib reads a file of the root through the library.
func readLib(t *testing.T, ctx context.Context, fs *client.FS, name string) []byte {
	t.Helper()
	a, err := fs.Lookup(ctx, client.Root(), fs.Root(), name)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := fs.Open(ctx, client.Root(), a.FID, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	buf := make([]byte, a.Size)
	n, err := f.ReadAt(ctx, buf, 0)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestLfsLayoutArgs checks setstripe's argument parsing and the templates
// it builds.
func TestLfsLayoutArgs(t *testing.T) {
	def := layout.RAID0{StripeCount: 1, StripeSize: 1 << 20, StripeOffset: -1}
	comp := func(id uint32, start, end uint64, count int32, size uint32, off int32, pool string) layout.Component {
		return layout.Component{ID: id, Pattern: layout.PatternRAID0, Start: start, End: end,
			RAID0: layout.RAID0{StripeCount: count, StripeSize: size, StripeOffset: off, Pool: pool}}
	}
	for _, tc := range []struct {
		args  string
		want  layout.Layout
		paths []string
		err   string
	}{
		{args: "-c 2 -S 4M f", want: layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 4 << 20, StripeOffset: -1}), paths: []string{"f"}},
		{args: "f --stripe-count=-1 -i1 --pool=nacre.fast g", want: layout.Plain(layout.RAID0{StripeCount: -1, StripeSize: 1 << 20, StripeOffset: 1, Pool: "fast"}),
			paths: []string{"f", "g"}},
		{args: "-E 1M -c 1 -E 64M -c 2 -E -1 -c 4 f", want: layout.Layout{Composite: true, Components: []layout.Component{
			comp(1, 0, 1<<20, 1, 1<<20, -1, ""), comp(2, 1<<20, 64<<20, 2, 1<<20, -1, ""), comp(3, 64<<20, layout.EOF, 4, 1<<20, -1, "")}},
			paths: []string{"f"}},
		// A component's unset count, size and pool are the previous one's.
		{args: "-E 4M -c 2 -S 2M -p p -i 3 -E eof f", want: layout.Layout{Composite: true, Components: []layout.Component{
			comp(1, 0, 4<<20, 2, 2<<20, 3, "p"), comp(2, 4<<20, layout.EOF, 2, 2<<20, -1, "p")}}, paths: []string{"f"}},
		{args: "-c 2 -E 1M f", err: "before the first -E"},
		{args: "-S 100k f", err: "not a multiple"},
		{args: "-o 1,2 f", err: "not supported"},
		{args: "-E 1M -c 1 -E 512k f", err: "layout"},
		{args: "-c", err: "needs a value"},
	} {
		la, err := parseLayoutArgs(strings.Fields(tc.args), map[string]string{"delete": "d"})
		var l layout.Layout
		if err == nil {
			l, err = la.template(def)
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.args, err)
			continue
		}
		if l.String() != tc.want.String() || !slices.Equal(la.paths, tc.paths) {
			t.Errorf("%s:\n got %v %q\nwant %v %q", tc.args, l, la.paths, tc.want, tc.paths)
		}
		// getstripe -y of the template reads back as the same template.
		var y bytes.Buffer
		dumpLayout(&y, "f", clientFID(), &l, true, gsParams{v: vDefault, yaml: true, depth: 1, ost: -1})
		back, err := parseGetstripeYAML(y.Bytes())
		if err != nil || back.String() != l.String() {
			t.Errorf("%s: -y read back as %v (%v):\n%s", tc.args, back, err, y.String())
		}
	}
}

func clientFID() client.FID { return client.FID{Seq: 0x200000400, Oid: 1} }

// TestLfsDfRow checks df's lines against Lustre's showdf.
func TestLfsDfRow(t *testing.T) {
	st := client.TargetStatfs{UUID: "nacre-OST0001_UUID", Index: 1, Bsize: 4096, Blocks: 1 << 20, Bfree: 3 << 18, Bavail: 1 << 19}
	for _, tc := range []struct {
		flags int
		want  string
	}{
		{0, "nacre-OST0001_UUID       4194304     1048576     2097152  33% /mnt/nacre[OST:1]\n"},
		// Lustre divides while the value is over 1024: 1 GiB is 1024.0M.
		{dfCooked, "nacre-OST0001_UUID          4.0G     1024.0M        2.0G  33% /mnt/nacre[OST:1]\n"},
		{dfInodes, "nacre-OST0001_UUID             0           0           0   0% /mnt/nacre[OST:1]\n"},
	} {
		var b bytes.Buffer
		dfRow(&b, st, "/mnt/nacre", tc.flags, "OST")
		diff(t, fmt.Sprintf("df row, flags %#x", tc.flags), b.String(), tc.want)
	}
	var b bytes.Buffer
	dfRow(&b, client.TargetStatfs{UUID: "nacre-OST0002_UUID", Error: "x", Errno: int(unix.EAGAIN)}, "/mnt/nacre", 0, "OST")
	diff(t, "df row of a target that did not answer", b.String(), "nacre-OST0002_UUID  : Resource temporarily unavailable\n")
}

// TestLfsFindSize checks find's size test against Lustre's rounding.
func TestLfsFindSize(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		size int64
		want bool
	}{
		{"1M", 1 << 20, true}, {"1M", 1, true}, {"1M", 0, false}, {"1M", 1<<20 + 1, false},
		{"+1M", 1<<20 + 1, true}, {"+1M", 1 << 20, false},
		{"-2M", 1 << 20, true}, {"-2M", 1<<20 + 1, false},
		{"100", 100, true}, {"-100", 99, true}, {"+100", 100, false},
	} {
		ft, err := parseFindTest("size", tc.arg)
		if err != nil {
			t.Fatal(err)
		}
		if got := sizeMatch(tc.size, &ft); got != tc.want {
			t.Errorf("-size %s of %d: %v, want %v", tc.arg, tc.size, got, tc.want)
		}
	}
}

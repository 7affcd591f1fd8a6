package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/layout"
)

// TestLustreXattrs checks the virtual lustre.* attributes through the
// library: a layout given to a file made without objects, a directory's
// default set and dropped, the FID, the MDT's attributes, the targets and
// their space, paths by FID, and directory pages that split a large
// directory without losing or repeating an entry.
func TestLustreXattrs(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 4})
	fs := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cred := client.Root()
	root := fs.Root()
	get := func(f client.FID, name string) []byte {
		t.Helper()
		v, err := fs.Getxattr(ctx, cred, f, name)
		if err != nil {
			t.Fatalf("getxattr %s: %v", name, err)
		}
		return v
	}
	set := func(f client.FID, name string, l layout.Layout, flags int) error {
		t.Helper()
		v, err := l.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return fs.Setxattr(ctx, cred, f, name, v, flags)
	}
	two := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 1 << 20, StripeOffset: 1})

	t.Run("lov of a delayed file", func(t *testing.T) {
		f, a, err := fs.Create(ctx, cred, root, "delayed", syscall.O_CREAT|syscall.O_RDWR, 0o644, &client.CreateOptions{Delay: true})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(ctx)
		if _, err := fs.Getxattr(ctx, cred, a.FID, client.XattrLOV); !errors.Is(err, syscall.ENODATA) {
			t.Fatalf("lustre.lov of a file without objects: %v, want ENODATA", err)
		}
		if err := set(a.FID, client.XattrLOV, two, client.XattrCreate); err != nil {
			t.Fatal(err)
		}
		l, err := layout.Unmarshal(get(a.FID, client.XattrLOV))
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Components[0]; len(got.Objects) != 2 || got.Objects[0].OSTIndex != 1 || got.StripeSize != 1<<20 {
			t.Fatalf("layout after set: %v", l)
		}
		// The open file writes to the objects the layout gave it.
		if _, _, err := f.WriteAt(ctx, []byte("hello"), 3<<20); err != nil {
			t.Fatal(err)
		}
		// Set again: EEXIST with XATTR_CREATE, ignored without (cp -a).
		if err := set(a.FID, client.XattrLOV, two, client.XattrCreate); !errors.Is(err, syscall.EEXIST) {
			t.Fatalf("XATTR_CREATE on a file with objects: %v, want EEXIST", err)
		}
		if err := set(a.FID, client.XattrLOV, l, 0); err != nil {
			t.Fatalf("set without XATTR_CREATE on a file with objects: %v, want it ignored", err)
		}
		if err := set(a.FID, client.XattrLOV, two, 0); err != nil {
			t.Fatalf("set of another layout on a file with objects: %v, want it ignored", err)
		}
		if kept, err := layout.Unmarshal(get(a.FID, client.XattrLOV)); err != nil || !slices.Equal(kept.Components[0].Objects, l.Components[0].Objects) {
			t.Fatalf("layout after the ignored sets: %v %v, want %v", kept, err, l)
		}
		// Ignored only for whom the MDT would let write the file: root's
		// 0644 file refuses another user, flags or not.
		v, err := two.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		other := client.Cred{UID: 1000, GID: 1000}
		for _, flags := range []int{0, client.XattrCreate} {
			if err := fs.Setxattr(ctx, other, a.FID, client.XattrLOV, v, flags); !errors.Is(err, syscall.EACCES) {
				t.Fatalf("lustre.lov set by another user (flags %d): %v, want EACCES", flags, err)
			}
		}
		names, err := fs.Listxattr(ctx, cred, a.FID)
		if err != nil || !slices.Contains(names, client.XattrLOV) {
			t.Fatalf("listxattr: %q %v", names, err)
		}
		if got := string(get(a.FID, client.XattrFID)); got != a.FID.String() || !strings.HasPrefix(got, "[0x") {
			t.Fatalf("lustre.fid: %q, want %v", got, a.FID)
		}
		if err := fs.Setxattr(ctx, cred, a.FID, client.XattrFID, []byte("x"), 0); !errors.Is(err, syscall.EOPNOTSUPP) {
			t.Fatalf("set lustre.fid: %v, want EOPNOTSUPP", err)
		}
	})

	t.Run("directory default", func(t *testing.T) {
		d, err := fs.Mkdir(ctx, cred, root, "dir", 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.Getxattr(ctx, cred, d.FID, client.XattrLOV); !errors.Is(err, syscall.ENODATA) {
			t.Fatalf("lustre.lov of a directory without a default: %v", err)
		}
		if err := set(d.FID, client.XattrLOV, two, 0); err != nil {
			t.Fatal(err)
		}
		f, _, err := fs.Create(ctx, cred, d.FID, "f", syscall.O_CREAT|syscall.O_RDWR, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Close(ctx)
		if n := len(f.Layout().Components[0].Objects); n != 2 {
			t.Fatalf("a file in the directory has %d stripes, want 2", n)
		}
		if err := fs.Removexattr(ctx, cred, d.FID, client.XattrLOV); err != nil {
			t.Fatal(err)
		}
		// Gone: like a directory that never had one, and new files get
		// the file system's default.
		if _, err := fs.Getxattr(ctx, cred, d.FID, client.XattrLOV); !errors.Is(err, syscall.ENODATA) {
			t.Fatalf("lustre.lov of a directory after its removal: %v", err)
		}
		if err := fs.Removexattr(ctx, cred, d.FID, client.XattrLOV); !errors.Is(err, syscall.ENODATA) {
			t.Fatalf("second removal: %v", err)
		}
		g, _, err := fs.Create(ctx, cred, d.FID, "g", syscall.O_CREAT|syscall.O_RDWR, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		g.Close(ctx)
		if n := len(g.Layout().Components[0].Objects); n != layout.DefaultStripeCount {
			t.Fatalf("a file made after the removal has %d stripes, want the file system's %d", n, layout.DefaultStripeCount)
		}
	})

	t.Run("lsom, targets, statfs, instance", func(t *testing.T) {
		var a client.MDTAttr
		if err := json.Unmarshal(get(root, client.XattrLSOM), &a); err != nil || a.Mode&syscall.S_IFMT != syscall.S_IFDIR || a.FID != root.String() {
			t.Fatalf("lustre.lsom of the root: %+v %v", a, err)
		}
		var ts []client.TargetInfo
		if err := json.Unmarshal(get(root, client.XattrTargets), &ts); err != nil || len(ts) != 5 {
			t.Fatalf("lustre.targets: %+v %v", ts, err)
		}
		if ts[0] != (client.TargetInfo{Type: "MDT", UUID: "nacre-MDT0000_UUID", Active: true}) ||
			ts[4] != (client.TargetInfo{Type: "OST", Index: 3, UUID: "nacre-OST0003_UUID", Active: true}) {
			t.Fatalf("lustre.targets: %+v", ts)
		}
		var st []client.TargetStatfs
		if err := json.Unmarshal(get(root, client.XattrStatfs), &st); err != nil || len(st) != 5 {
			t.Fatalf("lustre.statfs: %+v %v", st, err)
		}
		for _, s := range st {
			if s.Error != "" || s.Blocks == 0 || s.Bsize == 0 || s.Files == 0 {
				t.Errorf("lustre.statfs: %+v", s)
			}
		}
		if got, want := string(get(root, client.XattrInstance)), "nacre-"+fs.Instance(); got != want {
			t.Fatalf("lustre.instance: %q, want %q", got, want)
		}
	})

	t.Run("fid2path", func(t *testing.T) {
		a, err := fs.Lookup(ctx, cred, root, "dir")
		if err != nil {
			t.Fatal(err)
		}
		f, err := fs.Lookup(ctx, cred, a.FID, "f")
		if err != nil {
			t.Fatal(err)
		}
		var paths [][]byte
		if err := json.Unmarshal(get(root, client.XattrFID2PathPrefix+f.FID.String()), &paths); err != nil || len(paths) != 1 || string(paths[0]) != "/dir/f" {
			t.Fatalf("fid2path: %q %v", paths, err)
		}
		if _, err := fs.Getxattr(ctx, cred, root, client.XattrFID2PathPrefix+"nonsense"); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("fid2path of a bad FID: %v", err)
		}
	})

	t.Run("hsm", func(t *testing.T) {
		f, a, err := fs.Create(ctx, cred, root, "hsmfile", syscall.O_CREAT|syscall.O_RDWR, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Close(ctx)
		info := func() client.HSMInfo {
			t.Helper()
			var h client.HSMInfo
			if err := json.Unmarshal(get(a.FID, client.XattrHSM), &h); err != nil {
				t.Fatal(err)
			}
			return h
		}
		if h := info(); h.Flags != 0 || h.ArchiveID != 0 {
			t.Fatalf("lustre.hsm of a new file: %+v", h)
		}
		change := func(v string) error { return fs.Setxattr(ctx, cred, a.FID, client.XattrHSM, []byte(v), 0) }
		// Released before any archive: EPERM, nothing changes.
		if err := fs.Setxattr(ctx, cred, a.FID, client.XattrHSMRelease, []byte("1"), 0); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("release of a never-archived file: %v, want EPERM", err)
		}
		if err := change(`{"set":9,"archive_id":3}`); err != nil {
			t.Fatal(err)
		}
		if h := info(); h.Flags != client.HSMExists|client.HSMArchived || h.ArchiveID != 3 {
			t.Fatalf("lustre.hsm after setting exists archived: %+v", h)
		}
		if err := change(`{"clear":8}`); err != nil {
			t.Fatal(err)
		}
		if h := info(); h.Flags != client.HSMExists || h.ArchiveID != 3 {
			t.Fatalf("lustre.hsm after clearing archived: %+v", h)
		}
		if err := change(`{"set":`); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("lustre.hsm set to bad JSON: %v, want EINVAL", err)
		}
		if _, err := fs.Getxattr(ctx, cred, root, client.XattrHSM); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("lustre.hsm of a directory: %v, want EINVAL", err)
		}
		if _, err := fs.Getxattr(ctx, cred, a.FID, client.XattrHSMRelease); !errors.Is(err, syscall.ENODATA) {
			t.Fatalf("reading lustre.hsm_release: %v, want ENODATA", err)
		}
	})

	t.Run("readdir pages", func(t *testing.T) {
		d, err := fs.Mkdir(ctx, cred, root, "big", 0o755)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		long := strings.Repeat("n", 200)
		for i := range 400 {
			name := fmt.Sprintf("%s-%03d", long, i)
			if i%3 == 0 {
				_, err = fs.Mkdir(ctx, cred, d.FID, name, 0o755)
			} else {
				var f *client.File
				f, _, err = fs.Create(ctx, cred, d.FID, name, syscall.O_CREAT|syscall.O_RDWR, 0o644, nil)
				if err == nil {
					f.Close(ctx)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			want[name] = true
		}
		seen := map[string]bool{}
		pages := 0
		for cookie := uint64(0); cookie != client.DirEnd; pages++ {
			v := get(d.FID, client.XattrReaddirPrefix+strconv.FormatUint(cookie, 16))
			if len(v) > 64<<10 {
				t.Fatalf("page of %d bytes: more than an xattr holds", len(v))
			}
			var p client.DirPage
			if err := json.Unmarshal(v, &p); err != nil {
				t.Fatal(err)
			}
			for _, e := range p.Entries {
				n := string(e.Name)
				if seen[n] || !want[n] {
					t.Fatalf("entry %q: seen before %v, expected %v", n, seen[n], want[n])
				}
				seen[n] = true
				isDir := e.Type == syscall.DT_DIR
				if e.Attr == nil || (e.Attr.Mode&syscall.S_IFMT == syscall.S_IFDIR) != isDir || (!isDir && len(e.Layout) == 0) {
					t.Fatalf("entry %q: type %d attr %+v layout %d bytes", n, e.Type, e.Attr, len(e.Layout))
				}
			}
			if p.Next != client.DirEnd && p.Next <= cookie {
				t.Fatalf("next cookie %#x after %#x", p.Next, cookie)
			}
			cookie = p.Next
		}
		if len(seen) != len(want) || pages < 2 {
			t.Fatalf("%d entries in %d pages, want %d in several", len(seen), pages, len(want))
		}
		// Each page read is an open: it needs read permission, which
		// the MDT's READDIR leaves to the client.
		priv, err := fs.Mkdir(ctx, cred, root, "priv", 0o711)
		if err != nil {
			t.Fatal(err)
		}
		other := client.Cred{UID: 1000, GID: 1000}
		for _, cookie := range []uint64{0, 2} {
			name := client.XattrReaddirPrefix + strconv.FormatUint(cookie, 16)
			if _, err := fs.Getxattr(ctx, other, priv.FID, name); !errors.Is(err, syscall.EACCES) {
				t.Fatalf("%s of a 0711 directory by another user: %v, want EACCES", name, err)
			}
		}
	})
}

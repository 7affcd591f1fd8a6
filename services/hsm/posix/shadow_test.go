package posix_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/fid"
)

// TestShadowNamespace: the copytool keeps ROOT/shadow/PATH as a relative
// symlink to each file's archive copy, PATH being where the file was when
// archived; archiving again after a rename moves the link (and prunes
// the directories it leaves empty); a link another file has taken over
// (same name, new file) survives the removal of the old file's copy; the
// copy of a deleted file is removed, with its link.
func TestShadowNamespace(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	fsys := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred := client.Root()
	root := t.TempDir()
	ct, err := posixNew(fsys, root)
	if err != nil {
		t.Fatal(err)
	}
	noProgress := func(done, total uint64) {}

	mkdir := func(parent fid.FID, name string) fid.FID {
		t.Helper()
		a, err := fsys.Mkdir(ctx, cred, parent, name, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		return a.FID
	}
	write := func(parent fid.FID, name string, data []byte) fid.FID {
		t.Helper()
		f, _, err := fsys.Create(ctx, cred, parent, name, syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return f.FID()
	}
	archive := func(f fid.FID) {
		t.Helper()
		if _, err := ct.Archive(ctx, f, 1, noProgress); err != nil {
			t.Fatalf("archive %v: %v", f, err)
		}
	}
	shadow := func(p string) string { return filepath.Join(ct.ShadowRoot(), filepath.FromSlash(p)) }
	// linked checks that the shadow link of p is relative and reads data.
	linked := func(p string, f fid.FID, data []byte) {
		t.Helper()
		target, err := os.Readlink(shadow(p))
		if err != nil {
			t.Fatalf("shadow link of %s: %v", p, err)
		}
		if filepath.IsAbs(target) || filepath.Join(filepath.Dir(shadow(p)), target) != ct.Path(f) {
			t.Fatalf("shadow link of %s -> %s, want a relative link to %s", p, target, ct.Path(f))
		}
		if got, err := os.ReadFile(shadow(p)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read through the shadow link of %s: %d bytes, %v", p, len(got), err)
		}
	}
	gone := func(p string) {
		t.Helper()
		if _, err := os.Lstat(shadow(p)); !os.IsNotExist(err) {
			t.Fatalf("shadow %s still there: %v", p, err)
		}
	}

	d1 := mkdir(fsys.Root(), "d1")
	d2 := mkdir(d1, "d2")
	other := mkdir(fsys.Root(), "other")
	v1 := bytes.Repeat([]byte("version 1 "), 1000)
	f := write(d2, "a", v1)
	archive(f)
	linked("/d1/d2/a", f, v1)

	// Renamed and changed, archived again: the link moves, d1/d2 and d1
	// are pruned once empty.
	if err := fsys.Rename(ctx, cred, d2, "a", other, "b", 0); err != nil {
		t.Fatal(err)
	}
	v2 := []byte("version 2")
	g, _, err := fsys.Open(ctx, cred, f, syscall.O_WRONLY|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.WriteAt(ctx, v2, 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	archive(f)
	linked("/other/b", f, v2)
	gone("/d1/d2/a")
	gone("/d1")

	// A new file takes the name of a deleted one: the link is the new
	// file's, and removing the old copy leaves it.
	old := write(other, "c", []byte("old c"))
	archive(old)
	if err := fsys.Unlink(ctx, cred, other, "c"); err != nil {
		t.Fatal(err)
	}
	newer := write(other, "c", []byte("new c"))
	archive(newer)
	linked("/other/c", newer, []byte("new c"))
	if err := ct.Remove(ctx, old); err != nil {
		t.Fatalf("remove the copy of a deleted file: %v", err)
	}
	if _, err := os.Stat(ct.Path(old)); !os.IsNotExist(err) {
		t.Fatalf("copy of the deleted file still there: %v", err)
	}
	linked("/other/c", newer, []byte("new c"))

	// Remove: the copy and its link go; the directory stays while it
	// holds other links.
	if err := ct.Remove(ctx, f); err != nil {
		t.Fatal(err)
	}
	gone("/other/b")
	linked("/other/c", newer, []byte("new c"))
	if _, err := os.Stat(ct.Path(f)); !os.IsNotExist(err) {
		t.Fatalf("archive copy still there after remove: %v", err)
	}
	if err := ct.Remove(ctx, newer); err != nil {
		t.Fatal(err)
	}
	gone("/other")
	if ents, err := os.ReadDir(ct.ShadowRoot()); err != nil || len(ents) != 0 {
		t.Fatalf("shadow tree after every copy is removed: %v %v", ents, err)
	}
}

package mdt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/lnet/lnettest"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mds/mdd"
)

// ostImports connects node n to every OST of the cluster's OSS, as a
// client's OSCs do.
func (c *cluster) ostImports(n *node) []*ptlrpc.Import {
	var out []*ptlrpc.Import
	for i := range c.oss.devs {
		imp, err := n.pc.NewImport(ptlrpc.ImportConfig{Target: ostLabel(i), Servers: []lwire.ProcessID{c.oss.id}, Portal: ptlrpc.OSTIOPortal,
			PingInterval: -1, MinTimeout: 2 * time.Second})
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { imp.Close(context.Background()) })
		out = append(out, imp)
	}
	return out
}

func stripes(count int32, size uint32, offset int32, pool string) *layout.Layout {
	l := layout.Plain(layout.RAID0{StripeCount: count, StripeSize: size, StripeOffset: offset, Pool: pool})
	return &l
}

// objectsOf lists a layout's objects.
func objectsOf(l *layout.Layout) []layout.Object {
	if l == nil {
		return nil
	}
	var out []layout.Object
	for _, c := range l.Components {
		out = append(out, c.Objects...)
	}
	return out
}

// waitGone waits until every object is gone from its OST (OST_GETATTR
// answers ENOENT): the destroy log is worked in the background.
func waitGone(t testing.TB, ctx context.Context, imps []*ptlrpc.Import, objs []layout.Object) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, o := range objs {
		for {
			err := ostGetattr(ctx, imps[o.OSTIndex], o.Object)
			if errors.Is(err, syscall.ENOENT) {
				break
			}
			if err != nil {
				t.Fatalf("getattr %v: %v", o.Object, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("object %v on OST%d still exists", o.Object, o.OSTIndex)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestObjects: creates allocate objects on the OSTs as the layout says
// (stripe count 1, 4 and -1 over 4 OSTs, offsets, pools, directory
// defaults), from the precreated pools, and unlinks destroy them.
func TestObjects(t *testing.T) {
	c := newCluster(t, 4, func(cfg *Config) { cfg.StatfsInterval = 100 * time.Millisecond })
	n := c.client()
	imps := c.ostImports(n)
	ctx := ctxT(t, time.Minute)
	m := n.mdc
	r := n.root

	check := func(name string, l *layout.Layout, want int) []layout.Object {
		t.Helper()
		objs := objectsOf(l)
		if len(objs) != want {
			t.Fatalf("%s: %d objects, want %d (%v)", name, len(objs), want, l)
		}
		seen := map[uint32]bool{}
		for _, o := range objs {
			if seen[o.OSTIndex] {
				t.Fatalf("%s: two stripes on OST%d: %v", name, o.OSTIndex, l)
			}
			seen[o.OSTIndex] = true
			if err := ostGetattr(ctx, imps[o.OSTIndex], o.Object); err != nil {
				t.Fatalf("%s: object %v on OST%d: %v", name, o.Object, o.OSTIndex, err)
			}
		}
		return objs
	}
	for _, tc := range []struct {
		name  string
		l     *layout.Layout
		count int
	}{
		{"default", nil, 1},
		{"c1", stripes(1, 1<<20, -1, ""), 1},
		{"c4", stripes(4, 1<<20, -1, ""), 4},
		{"c-1", stripes(-1, 4<<20, -1, ""), 4},
		{"c8", stripes(8, 1<<20, -1, ""), 4},
	} {
		a, l, err := m.Create(ctx, root, r, tc.name, 0o644, &mdc.CreateOptions{Layout: tc.l})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		check(tc.name, l, tc.count)
		// The layout is the file's, as getattr returns it.
		_, got, err := m.GetattrLayout(ctx, root, a.FID)
		if err != nil || got == nil || fmt.Sprint(*got) != fmt.Sprint(*l) {
			t.Fatalf("%s: stored layout %v, created %v: %v", tc.name, got, l, err)
		}
		// A setattr of the mtime or size answers with the layout (the
		// client sets the objects' times or cuts them); others without.
		for _, sa := range []mdc.SetAttr{{Valid: mdc.AttrMtime, Mtime: 1e18}, {Valid: mdc.AttrSize | mdc.AttrMtime, Size: 0, Mtime: 2e18}, {Valid: mdc.AttrMode, Mode: 0o640}} {
			_, got, err := m.SetattrLayout(ctx, root, a.FID, sa)
			want := l
			if sa.Valid&(mdc.AttrMtime|mdc.AttrSize) == 0 {
				want = nil
			}
			if err != nil || (got == nil) != (want == nil) || (got != nil && fmt.Sprint(*got) != fmt.Sprint(*want)) {
				t.Fatalf("%s: setattr %+v: layout %v, want %v: %v", tc.name, sa, got, want, err)
			}
		}
	}
	// Round robin: files of one stripe go to every OST in turn.
	perOST := map[uint32]int{}
	for i := range 8 {
		_, l, err := m.Create(ctx, root, r, fmt.Sprintf("rr%d", i), 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		perOST[check("rr", l, 1)[0].OSTIndex]++
	}
	if len(perOST) != 4 {
		t.Fatalf("round robin over 4 OSTs used %v", perOST)
	}
	// A stripe offset starts the file on that OST.
	_, l, err := m.Create(ctx, root, r, "off2", 0o644, &mdc.CreateOptions{Layout: stripes(2, 1<<20, 2, "")})
	if err != nil {
		t.Fatal(err)
	}
	if objs := check("off2", l, 2); objs[0].OSTIndex != 2 || objs[1].OSTIndex != 3 {
		t.Fatalf("offset 2: %v", l)
	}
	// A pool limits the OSTs.
	c.mdt.SetPools(map[string][]uint32{"odd": {1, 3}})
	_, l, err = m.Create(ctx, root, r, "pool", 0o644, &mdc.CreateOptions{Layout: stripes(-1, 1<<20, -1, "odd")})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range check("pool", l, 2) {
		if o.OSTIndex%2 != 1 {
			t.Fatalf("pool odd: %v", l)
		}
	}
	// A directory's default layout goes to its files and subdirectories.
	d, err := m.Mkdir(ctx, root, r, "wide", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetLayout(ctx, root, d.FID, *stripes(3, 2<<20, -1, "")); err != nil {
		t.Fatal(err)
	}
	_, l, err = m.Create(ctx, root, d.FID, "f", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("inherited", l, 3)
	if l.Components[0].StripeSize != 2<<20 {
		t.Fatalf("inherited stripe size %d", l.Components[0].StripeSize)
	}
	sub, err := m.Mkdir(ctx, root, d.FID, "sub", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, l, err = m.Create(ctx, root, sub.FID, "f", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("inherited by a subdirectory", l, 3)
	// A delayed file gets its objects from SetLayout, once.
	df, l, err := m.Create(ctx, root, r, "delayed", 0o644, &mdc.CreateOptions{Delay: true})
	if err != nil || l != nil {
		t.Fatalf("delayed: %v %v", l, err)
	}
	if l, err = m.SetLayout(ctx, root, df.FID, *stripes(2, 1<<20, -1, "")); err != nil {
		t.Fatal(err)
	}
	delayed := check("set layout", l, 2)
	_, err = m.SetLayout(ctx, root, df.FID, *stripes(1, 1<<20, -1, ""))
	wantErrno(t, "set layout of a file with objects", err, syscall.EEXIST)
	_, _, err = m.Create(ctx, root, r, "bad", 0o644, &mdc.CreateOptions{Layout: &layout.Layout{Components: []layout.Component{{Pattern: layout.PatternRAID0, End: layout.EOF,
		RAID0: layout.RAID0{StripeCount: 1, StripeSize: 1 << 20, StripeOffset: -1, Objects: []layout.Object{{OSTIndex: 0, Object: fid.FID{Seq: 0x300000000, Oid: 1}}}}}}}})
	wantErrno(t, "a layout naming objects", err, syscall.EINVAL)

	// Creates take objects from the pools: far fewer precreate RPCs than
	// creates.
	before := c.mdt.Stats().Precreated
	var objs []layout.Object
	for i := range 200 {
		_, l, err := m.Create(ctx, root, r, fmt.Sprintf("many%d", i), 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, objectsOf(l)...)
	}
	// A pool refill may be in flight (the OST has made the objects, the
	// MDT has yet to hear): the counts agree once it lands.
	var ossCreates uint64
	for deadline := time.Now().Add(10 * time.Second); ; {
		ossCreates = 0
		for _, o := range c.oss.oss.OSTs() {
			ossCreates += o.Stats().Precreated
		}
		if ossCreates == c.mdt.Stats().Precreated || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c.mdt.Stats().Precreated < before || ossCreates != c.mdt.Stats().Precreated {
		t.Fatalf("precreated %d by the MDT, %d by the OSTs", c.mdt.Stats().Precreated, ossCreates)
	}
	precreates := c.srv.osp.Stats().Sent
	t.Logf("%d objects precreated, %d requests to the OSTs for %d creates", ossCreates, precreates, 200+20)

	// Unlink destroys the objects; so does a rename over a file.
	for i := range 200 {
		if err := m.Unlink(ctx, root, r, fmt.Sprintf("many%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Rename(ctx, root, r, "c1", r, "delayed", 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, imps, append(objs, delayed...))
	waitDrained(t, c)
	if st := c.mdt.Stats(); st.Destroyed < 202 {
		t.Fatalf("stats %+v", st)
	}
	c.check()
}

// TestOrphan: an open file keeps its objects when its last link goes, and
// its last close destroys them; a client that goes away closes its files.
func TestOrphan(t *testing.T) {
	c := newCluster(t, 2, nil)
	n := c.client()
	imps := c.ostImports(n)
	ctx := ctxT(t, time.Minute)
	f, err := n.mdc.Open(ctx, root, n.root, "f", syscall.O_CREAT|syscall.O_RDWR, 0o600, nil)
	if err != nil || !f.Created || f.Layout == nil {
		t.Fatalf("open O_CREAT: %+v %v", f, err)
	}
	objs := objectsOf(f.Layout)
	if err := n.mdc.Unlink(ctx, root, n.root, "f"); err != nil {
		t.Fatal(err)
	}
	if a, err := n.mdc.Getattr(ctx, root, f.FID); err != nil || a.Nlink != 0 {
		t.Fatalf("the orphan: %+v %v", a, err)
	}
	c.mdt.Sync()
	time.Sleep(100 * time.Millisecond)
	for _, o := range objs {
		if err := ostGetattr(ctx, imps[o.OSTIndex], o.Object); err != nil {
			t.Fatalf("an open file's object went: %v", err)
		}
	}
	if err := n.mdc.Close(ctx, root, f, &mdc.LSOM{Size: 10, Blocks: 8}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, imps, objs)
	wantErrno(t, "second close", n.mdc.Close(ctx, root, f, nil), syscall.EBADF)

	// A client that disconnects with files open: they are closed.
	g, err := n.mdc.Open(ctx, root, n.root, "g", syscall.O_CREAT|syscall.O_WRONLY, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.mdc.Unlink(ctx, root, n.root, "g"); err != nil {
		t.Fatal(err)
	}
	if c.mdt.Stats().Opens != 1 {
		t.Fatalf("opens %d", c.mdt.Stats().Opens)
	}
	n.imp.Close(ctx)
	waitGone(t, ctx, imps, objectsOf(g.Layout))
	if c.mdt.Stats().Opens != 0 || len(mustOrphans(t, c)) != 0 {
		t.Fatalf("after the client left: %+v", c.mdt.Stats())
	}
	c.check()
}

// TestCarriedCloses: closes put off by the client ride on its next request
// (a reint, an intent) and end their opens first — an unlinked file's
// objects go then — and a close of a handle not open is skipped; what no
// request carried the timer sends.
func TestCarriedCloses(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.client()
	imps := c.ostImports(n)
	ctx := ctxT(t, time.Minute)
	f, err := n.mdc.Open(ctx, root, n.root, "f", syscall.O_CREAT|syscall.O_RDWR, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := n.mdc.Open(ctx, root, n.root, "g", syscall.O_CREAT|syscall.O_RDWR, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.mdc.Unlink(ctx, root, n.root, "f"); err != nil {
		t.Fatal(err)
	}
	if got := c.mdt.Stats().Opens; got != 2 {
		t.Fatalf("opens %d, want 2", got)
	}
	if !n.mdc.CloseLater(root, f) {
		t.Fatal("close not put off")
	}
	if got := c.mdt.Stats().Opens; got != 2 || n.mdc.OpenHandles() != 2 {
		t.Fatalf("a put-off close went at once: %d opens, %d handles", got, n.mdc.OpenHandles())
	}
	// The next reint carries it: f's last open ends and its objects go.
	if _, err := n.mdc.Mkdir(ctx, root, n.root, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	if got := c.mdt.Stats().Opens; got != 1 || n.mdc.OpenHandles() != 1 {
		t.Fatalf("after a reint carried the close: %d opens, %d handles, want 1", got, n.mdc.OpenHandles())
	}
	waitGone(t, ctx, imps, objectsOf(f.Layout))
	// An intent carries one too; a second, stale close of f rides along
	// and is skipped.
	n.mdc.CloseLater(root, g)
	n.mdc.CloseLater(root, f)
	if _, err := n.mdc.Enqueue(ctx, root, mdc.Intent{Op: mdc.ItGetattr, Parent: n.root, Name: "d"}, ldlm.Hooks{}); err != nil {
		t.Fatal(err)
	}
	if got := c.mdt.Stats().Opens; got != 0 || n.mdc.OpenHandles() != 0 {
		t.Fatalf("after an intent carried the closes: %d opens, %d handles", got, n.mdc.OpenHandles())
	}
	// A carried close's CLOSE changelog record names the closer.
	if _, err := c.mdt.Store().ChangelogRegister(); err != nil {
		t.Fatal(err)
	}
	user := mdc.Cred{UID: 4242, GID: 4343}
	k, err := n.mdc.Open(ctx, root, n.root, "k", syscall.O_CREAT|syscall.O_RDWR, 0o666, nil)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := n.mdc.OpenFID(ctx, user, k.FID, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.mdc.Close(ctx, root, k, nil); err != nil {
		t.Fatal(err)
	}
	from := c.mdt.Store().ChangelogLast() + 1
	n.mdc.CloseLater(user, k2)
	if _, err := n.mdc.Mkdir(ctx, root, n.root, "k-dir", 0o755); err != nil {
		t.Fatal(err)
	}
	recs, err := c.mdt.Store().ChangelogRead(from, 100)
	if err != nil {
		t.Fatal(err)
	}
	var closeRec *mdd.ChangelogRecord
	for i := range recs {
		if recs[i].Type == mdd.CLClose && recs[i].TFID == k.FID {
			closeRec = &recs[i]
		}
	}
	if closeRec == nil || closeRec.UID != user.UID || closeRec.GID != user.GID {
		t.Fatalf("the carried close's changelog record: %+v (records %+v)", closeRec, recs)
	}
	// A request the MDT refuses (EEXIST) still ends its closes; the
	// client, which cannot tell that from a refusal of the request
	// service's (too big, too busy), sends them again with the next.
	opened := func(names ...string) []*mdc.File {
		var fs []*mdc.File
		for _, name := range names {
			f, err := n.mdc.Open(ctx, root, n.root, name, syscall.O_CREAT|syscall.O_RDWR, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
		return fs
	}
	for _, f := range opened("h", "i") {
		n.mdc.CloseLater(root, f)
	}
	if _, err := n.mdc.Mkdir(ctx, root, n.root, "d", 0o755); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("mkdir of an existing name: %v", err)
	}
	if got := c.mdt.Stats().Opens; got != 0 || n.mdc.OpenHandles() != 2 {
		t.Fatalf("after a refused reint carried the closes: %d opens, %d handles, want 0 and 2", got, n.mdc.OpenHandles())
	}
	if _, err := n.mdc.Mkdir(ctx, root, n.root, "d2", 0o755); err != nil {
		t.Fatal(err)
	}
	if got := c.mdt.Stats().Opens; got != 0 || n.mdc.OpenHandles() != 0 {
		t.Fatalf("after the next reint carried them again: %d opens, %d handles", got, n.mdc.OpenHandles())
	}
	// At most 32 are kept; a request carries at most 32; FlushCloses
	// sends the rest.
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprint("m", i))
	}
	kept := 0
	for _, f := range opened(many...) {
		if n.mdc.CloseLater(root, f) {
			kept++
		} else if err := n.mdc.Close(ctx, root, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	if kept != 32 || c.mdt.Stats().Opens != 32 {
		t.Fatalf("%d closes kept of 40, %d opens", kept, c.mdt.Stats().Opens)
	}
	n.mdc.FlushCloses(ctx)
	if got := c.mdt.Stats().Opens; got != 0 || n.mdc.OpenHandles() != 0 {
		t.Fatalf("after FlushCloses: %d opens, %d handles", got, n.mdc.OpenHandles())
	}
	// With no request to ride on, the timer sends it.
	for _, f := range opened("t") {
		n.mdc.CloseLater(root, f)
	}
	for deadline := time.Now().Add(10 * time.Second); c.mdt.Stats().Opens != 0 || n.mdc.OpenHandles() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the put-off close never went: %d opens", c.mdt.Stats().Opens)
		}
	}
	// Once the import is closed, kept closes are dropped (the MDT ended
	// the client's opens), not retried for ever.
	for _, f := range opened("u") {
		n.mdc.CloseLater(root, f)
	}
	n.imp.Close(ctx)
	n.mdc.FlushCloses(ctx)
	if n.mdc.PutOffCloses() != 0 {
		t.Fatalf("%d closes kept after the import closed", n.mdc.PutOffCloses())
	}
	for deadline := time.Now().Add(10 * time.Second); c.mdt.Stats().Opens != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the departed client's open stayed: %d opens", c.mdt.Stats().Opens)
		}
	}
	c.check()
}

// waitDrained waits until the destroy log is empty.
func waitDrained(t testing.TB, c *cluster) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); c.mdt.Stats().PendingDestroys != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the destroy log does not drain: %+v", c.mdt.Stats())
		}
	}
}

func mustOrphans(t testing.TB, c *cluster) []fid.FID {
	o, err := c.mdt.Store().Orphans()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestOpen covers REINT open: by name, by FID, O_CREAT, O_EXCL, and
// opening what cannot be opened.
func TestOpen(t *testing.T) {
	c := newCluster(t, 0, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	m := n.mdc
	f, err := m.Open(ctx, root, n.root, "f", syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o400, nil)
	if err != nil || !f.Created || f.Attr.Mode != syscall.S_IFREG|0o400 {
		t.Fatalf("create: %+v %v", f, err)
	}
	_, err = m.Open(ctx, root, n.root, "f", syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o400, nil)
	wantErrno(t, "O_EXCL of an existing file", err, syscall.EEXIST)
	g, err := m.Open(ctx, root, n.root, "f", syscall.O_CREAT|syscall.O_RDONLY, 0o644, nil)
	if err != nil || g.Created || g.FID != f.FID {
		t.Fatalf("O_CREAT of an existing file: %+v %v", g, err)
	}
	h, err := m.OpenFID(ctx, root, f.FID, syscall.O_RDONLY)
	if err != nil || h.FID != f.FID {
		t.Fatalf("open by FID: %+v %v", h, err)
	}
	// The creator opened a 0400 file for write; a later open for write by
	// its owner (not root) fails.
	alice := user(1000, 1000)
	af, err := m.Open(ctx, alice, n.root, "a", syscall.O_CREAT|syscall.O_WRONLY, 0o400, nil)
	if err != nil {
		wantErrno(t, "alice creates in the root (0755)", err, syscall.EACCES)
	} else {
		t.Fatalf("alice created in root's 0755 directory: %+v", af)
	}
	_, err = m.Open(ctx, root, n.root, "nope", syscall.O_RDONLY, 0, nil)
	wantErrno(t, "open missing", err, syscall.ENOENT)
	d, err := m.Mkdir(ctx, root, n.root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Open(ctx, root, n.root, "d", syscall.O_WRONLY, 0, nil)
	wantErrno(t, "open a directory for write", err, syscall.EISDIR)
	if dh, err := m.OpenFID(ctx, root, d.FID, syscall.O_RDONLY); err != nil {
		t.Fatalf("open a directory: %v", err)
	} else if err := m.Close(ctx, root, dh, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Symlink(ctx, root, n.root, "s", "f"); err != nil {
		t.Fatal(err)
	}
	_, err = m.Open(ctx, root, n.root, "s", syscall.O_RDONLY, 0, nil)
	wantErrno(t, "open a symlink", err, syscall.ELOOP)
	for _, x := range []*mdc.File{f, g, h} {
		if err := m.Close(ctx, root, x, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A handle closes only its own file.
	x, err := m.OpenFID(ctx, root, f.FID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	bogus := *x
	bogus.FID = d.FID
	wantErrno(t, "close with another file's handle", m.Close(ctx, root, &bogus, nil), syscall.EBADF)
	if err := m.Close(ctx, root, x, nil); err != nil {
		t.Fatal(err)
	}
	// The last close of a writer records the lazy size.
	w, err := m.OpenFID(ctx, root, f.FID, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx, root, w, &mdc.LSOM{Size: 123456, Blocks: 248}); err != nil {
		t.Fatal(err)
	}
	a0, err := m.Getattr(ctx, root, f.FID)
	if err != nil || a0.Size != 123456 || a0.Blocks != 248 {
		t.Fatalf("size after close: %+v %v", a0, err)
	}
	// A writer's close carries the times of its writes (one RPC, no
	// setattr); a reader's, or a writer's without them, leaves the times,
	// and so does a writer's with times older than the file's last change
	// (a utime that came first though made after the writes).
	wrote := time.Now().Add(time.Hour).UnixNano()
	for _, tc := range []struct {
		name         string
		flags        uint64
		mtime, ctime int64
		want         mdc.Attr
	}{
		{"writer without times", syscall.O_WRONLY, 0, 0, a0},
		{"reader with times", syscall.O_RDONLY, wrote, wrote, a0},
		{"writer with times", syscall.O_RDWR, wrote, wrote + 1, mdc.Attr{Mtime: wrote, Ctime: wrote + 1}},
		{"writer with older times", syscall.O_RDWR, wrote - 10, wrote - 10, mdc.Attr{Mtime: wrote, Ctime: wrote + 1}},
	} {
		h, err := m.OpenFID(ctx, root, f.FID, tc.flags)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.CloseWritten(ctx, root, h, nil, false, tc.mtime, tc.ctime); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		a, err := m.Getattr(ctx, root, f.FID)
		if err != nil || a.Mtime != tc.want.Mtime || a.Ctime != tc.want.Ctime || a.Size != 123456 {
			t.Fatalf("%s: mtime %d ctime %d size %d (%v), want mtime %d ctime %d", tc.name, a.Mtime, a.Ctime, a.Size, err, tc.want.Mtime, tc.want.Ctime)
		}
	}
	if c.mdt.Stats().Opens != 0 {
		t.Fatalf("opens left: %d", c.mdt.Stats().Opens)
	}
	c.check()
}

// TestOSTList: an OST that leaves the MDT's list gets no more objects
// (its objects are still destroyed), and one that comes back does.
func TestOSTList(t *testing.T) {
	c := newCluster(t, 2, nil)
	n := c.client()
	imps := c.ostImports(n)
	ctx := ctxT(t, time.Minute)
	all := &mdc.CreateOptions{Layout: stripes(-1, 1<<20, -1, "")}
	_, l, err := n.mdc.Create(ctx, root, n.root, "both", 0o644, all)
	if err != nil || len(objectsOf(l)) != 2 {
		t.Fatalf("over both: %v %v", l, err)
	}
	if err := c.mdt.SetOSTs(c.oss.osts()[:1]); err != nil {
		t.Fatal(err)
	}
	_, l1, err := n.mdc.Create(ctx, root, n.root, "one", 0o644, all)
	if err != nil || len(objectsOf(l1)) != 1 || objectsOf(l1)[0].OSTIndex != 0 {
		t.Fatalf("after OST1 left: %v %v", l1, err)
	}
	if err := n.mdc.Unlink(ctx, root, n.root, "both"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, imps, objectsOf(l))
	if err := c.mdt.SetOSTs(c.oss.osts()); err != nil {
		t.Fatal(err)
	}
	if _, l, err = n.mdc.Create(ctx, root, n.root, "again", 0o644, all); err != nil || len(objectsOf(l)) != 2 {
		t.Fatalf("after OST1 came back: %v %v", l, err)
	}
	if err := c.mdt.SetOSTs([]OST{{Index: 70000, Name: "x", Servers: c.oss.osts()[0].Servers}}); err == nil {
		t.Fatal("an OST index past the largest was accepted")
	}
	// With no OST left, a file needs objects and gets ENOSPC.
	c.mdt.SetOSTs(nil)
	_, _, err = n.mdc.Create(ctx, root, n.root, "none", 0o644, nil)
	wantErrno(t, "create without an OST", err, syscall.ENOSPC)
	c.check()
}

// TestObjectSequences: an OST's object sequence used up, the MDT moves to
// a new one; objects stay unique and none leaks.
func TestObjectSequences(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.ObjectSeqWidth, cfg.PrecreateMin, cfg.PrecreateMax = 20, 4, 8 })
	n := c.client()
	imps := c.ostImports(n)
	ctx := ctxT(t, time.Minute)
	seen := map[fid.FID]bool{}
	seqs := map[uint64]bool{}
	var all []layout.Object
	for i := range 50 {
		_, l, err := n.mdc.Create(ctx, root, n.root, fmt.Sprintf("f%d", i), 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		o := objectsOf(l)[0]
		if seen[o.Object] || o.Object.Oid > 20 {
			t.Fatalf("object %v", o.Object)
		}
		seen[o.Object], seqs[o.Object.Seq] = true, true
		all = append(all, o)
	}
	if len(seqs) < 3 {
		t.Fatalf("50 objects of width 20 from %d sequences", len(seqs))
	}
	if e, err := n.mdc.FLDQuery(ctx, all[len(all)-1].Object.Seq); err != nil || e.Type != 1 || e.Index != 0 {
		t.Fatalf("the FLD of an object sequence: %+v %v", e, err)
	}
	for i := range 50 {
		if err := n.mdc.Unlink(ctx, root, n.root, fmt.Sprintf("f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, ctx, imps, all)
	c.check()
}

// TestOSTRestart: the OSS restarts (losing the MDT's export): the MDT's
// pools wait for the orphan cleanup, then creates go on, and the objects
// precreated before the restart but never used are destroyed.
func TestOSTRestart(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) { cfg.PrecreateMin, cfg.PrecreateMax = 16, 16 })
	n := c.client()
	ctx := ctxT(t, time.Minute)
	_, l, err := n.mdc.Create(ctx, root, n.root, "before", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	used := objectsOf(l)[0].Object
	// Let the pool fill, then restart the OSS on the same devices.
	p := c.mdt.ospOf(0)
	for deadline := time.Now().Add(10 * time.Second); p.avail() < 8; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool does not fill")
		}
	}
	c.oss = c.oss.restart(t)
	_, l, err = n.mdc.Create(ctx, root, n.root, "after", 0o644, nil)
	if err != nil {
		t.Fatalf("create after the OSS restart: %v", err)
	}
	next := objectsOf(l)[0].Object
	if !c.oss.objectExists(t, 0, next) || !c.oss.objectExists(t, 0, used) {
		t.Fatalf("objects %v, %v after the restart", used, next)
	}
	// The pool's objects from before the restart were cleaned up: the
	// next object follows the last one used.
	if next.Seq != used.Seq || next.Oid != used.Oid+1 {
		t.Fatalf("object after the restart %v, the last before %v", next, used)
	}
	c.check()
}

// TestAwaitOSTs: an MDT whose OST list comes from the MGS later (as after
// a restart) holds creates until the list arrives, and they get objects;
// without a list they fail with ENOSPC after AllocTimeout, not at once
// with a file that has no objects.
func TestAwaitOSTs(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) {
		cfg.AwaitOSTs, cfg.AllocTimeout = true, time.Second
	})
	n := c.client()
	ctx := ctxT(t, time.Minute)
	start := time.Now()
	_, _, err := n.mdc.Create(ctx, root, n.root, "early", 0o644, nil)
	wantErrno(t, "create before the OST list", err, syscall.ENOSPC)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("create failed after %v, before AllocTimeout", d)
	}
	type result struct {
		l   *layout.Layout
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, l, err := n.mdc.Create(ctx, root, n.root, "waits", 0o644, nil)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("create returned before the OST list: %v %v", r.l, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := c.mdt.SetOSTs(c.oss.osts()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(objectsOf(r.l)) != 1 {
		t.Fatalf("create after the OST list: %v %v", r.l, r.err)
	}
	c.check()
}

// TestDegradedOST: an OST set degraded (obdfilter.*.degraded) or read-only
// gets no objects of new files while the others can take them, still gets
// its stripe when a file needs every OST, and gets objects again once it
// is healthy.
func TestDegradedOST(t *testing.T) {
	c := newCluster(t, 4, func(cfg *Config) { cfg.StatfsInterval = 50 * time.Millisecond })
	n := c.client()
	ctx := ctxT(t, time.Minute)
	m, r := n.mdc, n.root
	osts := c.oss.oss.OSTs()
	if len(osts) != 4 {
		t.Fatalf("%d OFDs", len(osts))
	}
	used := func(prefix string, files int, count int32) map[uint32]int {
		t.Helper()
		per := map[uint32]int{}
		for i := range files {
			_, l, err := m.Create(ctx, root, r, fmt.Sprintf("%s%d", prefix, i), 0o644, &mdc.CreateOptions{Layout: stripes(count, 1<<20, -1, "")})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objectsOf(l) {
				per[o.OSTIndex]++
			}
		}
		return per
	}
	// seen waits until the MDT's last statfs of OST2 says degraded (or not).
	seen := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			c.mdt.ospMu.Lock()
			p := c.mdt.osps[2]
			c.mdt.ospMu.Unlock()
			if p != nil && p.isDegraded() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the MDT has not seen OST2 degraded=%v for 10 s", want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	osts[2].SetDegraded(true)
	seen(true)
	if per := used("one", 24, 1); per[2] != 0 || per[0]+per[1]+per[3] != 24 {
		t.Fatalf("stripe count 1 with OST2 degraded: objects per OST %v; want all on the other three", per)
	}
	if per := used("three", 8, 3); per[2] != 0 {
		t.Fatalf("stripe count 3 with OST2 degraded: objects per OST %v", per)
	}
	if per := used("all", 4, -1); per[2] != 4 {
		t.Fatalf("stripe count -1 with OST2 degraded: objects per OST %v; want one on OST2 each time", per)
	}
	osts[2].SetDegraded(false)
	seen(false)
	if per := used("back", 16, 1); per[2] == 0 {
		t.Fatalf("OST2 healthy again: objects per OST %v", per)
	}
}

// TestCreateNamingObjectsOnlyInRecovery: a request marked as a replay
// (a flag its client sets) outside the MDT's recovery may not make a file
// on objects it names: another file's object would end up in two files.
// A replayed create during recovery does (TestReplayedCreateKeepsItsObjects
// in client).
func TestCreateNamingObjectsOnlyInRecovery(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	_, l, err := n.mdc.Create(ctx, root, n.root, "f", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	taken := *l
	if c.mdt.Target().Recovering() {
		t.Fatal("a new MDT recovering")
	}
	m := c.mdt
	req := mdd.Req{Cred: mdd.Root(), Replay: true, AssignTransno: m.tgt.InternalTransno}
	_, _, err = m.create(ctx, req, &createOp{parent: n.root, name: "g", mode: sIFREG | 0o644, layout: &taken})
	if !errors.Is(err, errBadRequest) { // EINVAL on the wire
		t.Errorf("a create marked as a replay, outside recovery, naming f's objects: %v, want a bad request", err)
	}
	if _, err := m.Store().Lookup(mdd.Req{Cred: mdd.Root()}, n.root, "g"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("g: %v, want ENOENT", err)
	}
}

// TestOrphanCleanupAfterALaterSequence: replayed creates name objects of
// a sequence the restored store had not recorded (the MDT moved to it
// after its last commit), a later one than the pool's: the orphan cleanup
// goes on from their last object, in their sequence. Going on in the old
// sequence from the store's last object there, it destroyed and gave
// again the old sequence's objects the replays used, and new files got
// objects before the OST's last one.
func TestOrphanCleanupAfterALaterSequence(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	_, l, err := n.mdc.Create(ctx, root, n.root, "f", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := objectsOf(l)[0].Object
	e, err := c.mdt.Store().AllocSuperSeq(mdd.TargetOST, 0)
	if err != nil {
		t.Fatal(err)
	}
	// What replays of creates on objects 1 to 3 of the later sequence
	// leave in the store.
	replayed := fid.FID{Seq: e.Start, Oid: 3}
	if err := c.mdt.Store().SetLastObject(0, replayed); err != nil {
		t.Fatal(err)
	}
	c.mdt.ospOf(0).evicted() // the cleanup runs again
	_, l, err = n.mdc.Create(ctx, root, n.root, "g", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := objectsOf(l)[0].Object, (fid.FID{Seq: replayed.Seq, Oid: replayed.Oid + 1}); got != want {
		t.Fatalf("a new file after replays to %v gets %v (the first file %v), want %v", replayed, got, first, want)
	}
	c.check()
}

// loseObjects makes OST i (its OSS stopped) as a crash before its
// precreates from object from on were committed leaves it: those objects
// gone, LAST_ID just before them.
func loseObjects(t *testing.T, dir string, i int, from fid.FID) {
	t.Helper()
	ctx := context.Background()
	dev := openOST(t, dir, i)
	defer dev.Close()
	lf := fid.FID{Seq: from.Seq}
	var b [4]byte
	if _, err := dev.ReadAt(ctx, lf, [][]byte{b[:]}, 0); err != nil {
		t.Fatal(err)
	}
	tx, err := dev.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	for oid := from.Oid; oid <= binary.LittleEndian.Uint32(b[:]); oid++ {
		if err := tx.Destroy(fid.FID{Seq: from.Seq, Oid: oid}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.WriteRecord(lf, binary.LittleEndian.AppendUint32(nil, from.Oid-1), 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dev.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDestroyAfterLostPrecreate: the MDT and the OSS restart after a crash
// in which the OST lost the precreate of an object that a file removed
// before it had (its destroy log record survived). The destroy worker
// found the object missing during the MDT's recovery and dropped the
// record; the orphan cleanup after recovery then made the object again,
// up to the last one used, and nothing ever destroyed it.
func TestDestroyAfterLostPrecreate(t *testing.T) {
	c := newCluster(t, 1, func(cfg *Config) {
		cfg.RecoveryWindow, cfg.OSTTimeout = 3*time.Second, 2*time.Second
	})
	n := c.client()
	ctx := ctxT(t, time.Minute)
	_, l, err := n.mdc.Create(ctx, root, n.root, "f", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj := objectsOf(l)[0].Object
	// f goes while the OSS is down: its record waits in the log.
	c.oss.close()
	if err := n.mdc.Unlink(ctx, root, n.root, "f"); err != nil {
		t.Fatal(err)
	}
	if err := c.mdt.Sync(); err != nil {
		t.Fatal(err)
	}
	c.stop()
	loseObjects(t, c.oss.dirs[0], 0, obj)
	c.oss = serveOSS(t, c.oss.ln, 0, 1, c.oss.dirs)
	c.start() // recovers, for n, which does not come back
	p := c.mdt.ospOf(0)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		recs, err := c.mdt.Store().PendingDestroys(0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 && p.avail() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("destroy log %v, pool %d objects", recs, p.avail())
		}
	}
	if c.oss.objectExists(t, 0, obj) {
		t.Fatalf("object %v of a removed file exists, its destroy log record gone", obj)
	}
	c.check()
}

// TestPlanFillFailsWithoutTaking: a plan whose component was instantiated
// meanwhile takes nothing, and its release gives the reservations back.
// It counted them as taken, so they were held for good: the pool had that
// many objects fewer, and its next orphan cleanup (after the OST restarts)
// waited for them to end, each step until its timeout.
func TestPlanFillFailsWithoutTaking(t *testing.T) {
	c := newCluster(t, 1, nil)
	ctx := ctxT(t, time.Minute)
	p := c.mdt.ospOf(0)
	for deadline := time.Now().Add(10 * time.Second); p.avail() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool does not fill")
		}
	}
	tmpl := layout.Plain(layout.RAID0{StripeCount: 1, StripeSize: 1 << 20, StripeOffset: -1})
	pl, err := c.mdt.allocateComp(ctx, tmpl, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := tmpl.Clone()
	now.Components[0].Objects = []layout.Object{{OSTIndex: 0, Object: fid.FID{Seq: 0x240000400, Oid: 1}}}
	if _, err := pl.fill(now); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("fill of an instantiated component: %v, want EAGAIN", err)
	}
	pl.release()
	p.mu.Lock()
	reserved := p.mu.reserved
	p.mu.Unlock()
	if reserved != 0 {
		t.Fatalf("%d objects still reserved after the plan's release", reserved)
	}
}

// TestStripesSkipDownOSTs: an OST out of reach gets no new objects while
// others can take them: a file over every OST (-1) is made at once over
// those left, a count the others can hold goes to them, a larger count is
// cut to them (as Lustre cuts it to the active OSTs). Back in reach, the
// OST gets objects again.
func TestStripesSkipDownOSTs(t *testing.T) {
	c := newCluster(t, 2, func(cfg *Config) {
		cfg.StatfsInterval, cfg.OSTTimeout, cfg.AllocTimeout = 100*time.Millisecond, 2*time.Second, 3*time.Second
	})
	n := c.client()
	ctx := ctxT(t, 2*time.Minute)
	third := serveOSS(t, lnettest.Start(t, fmt.Sprintf("127.0.0.%d", clientBase+7), c.port), 2, 1, nil)
	if err := c.mdt.SetOSTs(append(c.oss.osts(), third.osts()...)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three OSTs with objects", func() bool { return c.mdt.ReadyOSTs() == 3 })
	all := &mdc.CreateOptions{Layout: stripes(-1, 1<<20, -1, "")}
	osts := func(name string, opts *mdc.CreateOptions) ([]uint32, error) {
		_, l, err := n.mdc.Create(ctx, root, n.root, name, 0o644, opts)
		var idx []uint32
		for _, o := range objectsOf(l) {
			idx = append(idx, o.OSTIndex)
		}
		slices.Sort(idx)
		return idx, err
	}
	if idx, err := osts("all-up", all); err != nil || len(idx) != 3 {
		t.Fatalf("over every OST, all up: %v %v", idx, err)
	}

	third.close()
	down := c.mdt.ospOf(2)
	waitFor(t, "OST2 seen down", down.isDown)
	start := time.Now()
	if idx, err := osts("all-but-one", all); err != nil || !slices.Equal(idx, []uint32{0, 1}) {
		t.Fatalf("over every OST, OST2 down: %v %v", idx, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a create over every OST with one down took %v", d)
	}
	for i := range 3 {
		if idx, err := osts(fmt.Sprint("two-", i), &mdc.CreateOptions{Layout: stripes(2, 1<<20, -1, "")}); err != nil || !slices.Equal(idx, []uint32{0, 1}) {
			t.Fatalf("two stripes, OST2 down: %v %v", idx, err)
		}
	}
	if idx, err := osts("three", &mdc.CreateOptions{Layout: stripes(3, 1<<20, -1, "")}); err != nil || !slices.Equal(idx, []uint32{0, 1}) {
		t.Fatalf("three stripes, OST2 down: %v %v", idx, err)
	}
	if idx, err := osts("from-two", &mdc.CreateOptions{Layout: stripes(1, 1<<20, 2, "")}); err != nil || !slices.Equal(idx, []uint32{0}) {
		t.Fatalf("one stripe from OST2, OST2 down: %v %v", idx, err)
	}

	third = third.restart(t)
	waitFor(t, "OST2 back", func() bool { return !down.isDown() && c.mdt.ReadyOSTs() == 3 })
	if idx, err := osts("all-again", all); err != nil || len(idx) != 3 {
		t.Fatalf("over every OST, OST2 back: %v %v", idx, err)
	}
	c.check()
}

// waitFor polls cond for up to 30 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

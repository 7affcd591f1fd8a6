package lov_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/lov"
	"github.com/nacrefs/nacre/client/osc"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/internal/tmpfs"
)

const portBase = 30200

func startCluster(t testing.TB, opts clienttest.Options) *clienttest.Cluster {
	t.Helper()
	if opts.PortBase == 0 {
		opts.PortBase = portBase
	}
	c, err := clienttest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newNode(t testing.TB, c *clienttest.Cluster, i int, cfg osc.Config) *clienttest.Node {
	t.Helper()
	n, err := c.NewNode(i, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func openFile(t testing.TB, l layout.Layout, n *clienttest.Node) *lov.File {
	t.Helper()
	f, err := lov.Open(l, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func fill(b []byte, r *rand.Rand) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, r.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// memOSTs returns n tmpfs directories for OSTs when the test runs as root
// (CI does), so that the exercisers do not wait for a disk; otherwise none
// (temporary directories on disk).
func memOSTs(t *testing.T, n int) []string {
	if os.Geteuid() != 0 {
		return nil
	}
	var dirs []string
	for range n {
		dirs = append(dirs, tmpfs.Mount(t, "1g"))
	}
	return dirs
}

// model is the file as it should be.
type model struct{ b []byte }

func (m *model) write(p []byte, off int) {
	if end := off + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	copy(m.b[off:], p)
}

func (m *model) truncate(size int) {
	if size <= len(m.b) {
		m.b = m.b[:size]
		return
	}
	m.b = append(m.b, make([]byte, size-len(m.b))...)
}

// check reads [off, off+n) through f and compares it with the model,
// including the short read and io.EOF at the end.
func (m *model) check(ctx context.Context, f *lov.File, off, n int) error {
	got := make([]byte, n)
	k, err := f.ReadAt(ctx, got, int64(off))
	want := 0
	if off < len(m.b) {
		want = min(n, len(m.b)-off)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read [%d,+%d): %v", off, n, err)
	}
	if k != want || (want < n) != errors.Is(err, io.EOF) {
		return fmt.Errorf("read [%d,+%d) of a %d-byte file: %d bytes, %v; want %d", off, n, len(m.b), k, err, want)
	}
	if err := m.same(got[:k], off, "read"); err != nil {
		return fmt.Errorf("read [%d,+%d): %w", off, n, err)
	}
	// The same without a copy: the cached pages themselves.
	var v osc.Vec
	defer v.Release()
	scratch := make([]byte, n)
	k, err = f.ReadVec(ctx, &v, scratch, int64(off))
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read vec [%d,+%d): %v", off, n, err)
	}
	if k != want || v.Len() != k || (want < n) != errors.Is(err, io.EOF) {
		return fmt.Errorf("read vec [%d,+%d) of a %d-byte file: %d bytes in a vec of %d, %v; want %d", off, n, len(m.b), k, v.Len(), err, want)
	}
	var joined []byte
	for _, b := range v.Bufs() {
		joined = append(joined, b...)
	}
	if err := m.same(joined, off, "read vec"); err != nil {
		return fmt.Errorf("read vec [%d,+%d): %w", off, n, err)
	}
	return nil
}

// same compares got with the model's bytes at off.
func (m *model) same(got []byte, off int, what string) error {
	want := m.b[off : off+len(got)]
	if bytes.Equal(got, want) {
		return nil
	}
	i := 0
	for i < len(got) && got[i] == want[i] {
		i++
	}
	return fmt.Errorf("%s differs from the model at file offset %d: got %#x want %#x", what, off+i, got[i], want[i])
}

// fsx runs ops random operations on f (through node a) against a model,
// in the style of fsx: writes, reads, appends, truncates, size checks and
// syncs, at random offsets and lengths, some page-aligned and most not.
// Every so often other (a second node's view of the same file) reads a
// range, which calls back a's locks (a writes back its dirty pages and
// drops its cache) and checks the OST's copy.
func fsx(t *testing.T, f, other *lov.File, seed uint64, ops, maxLen int) {
	ctx := ctxT(t, 30*time.Minute)
	r := rand.New(rand.NewPCG(seed, 42))
	m := &model{}
	buf := make([]byte, 512<<10)
	randLen := func() int {
		switch r.IntN(10) {
		case 0, 1, 2:
			return 1 + r.IntN(100)
		case 3:
			return 4096 * (1 + r.IntN(16))
		case 4:
			return 1 + r.IntN(300<<10)
		}
		return 1 + r.IntN(64<<10)
	}
	randOff := func(limit int) int {
		off := r.IntN(limit)
		if r.IntN(4) == 0 {
			off &^= 4095
		}
		return off
	}
	counts := map[string]int{}
	for i := range ops {
		op := r.IntN(100)
		var err error
		switch {
		case op < 30: // read
			if len(m.b) == 0 {
				continue
			}
			counts["read"]++
			off := randOff(len(m.b) + 4096)
			err = m.check(ctx, f, off, randLen())
		case op < 60: // write
			counts["write"]++
			n, off := randLen(), randOff(maxLen)
			p := buf[:n]
			fill(p, r)
			var k int
			if k, err = f.WriteAt(ctx, p, int64(off)); err == nil && k != n {
				err = fmt.Errorf("short write %d of %d", k, n)
			}
			m.write(p, off)
		case op < 68: // append
			if len(m.b) > maxLen {
				continue
			}
			counts["append"]++
			p := buf[:randLen()]
			fill(p, r)
			var at int64
			if _, at, err = f.Append(ctx, p); err == nil && at != int64(len(m.b)) {
				err = fmt.Errorf("append at %d, file was %d bytes", at, len(m.b))
			}
			m.write(p, len(m.b))
		case op < 78: // truncate
			counts["truncate"]++
			size := r.IntN(maxLen)
			if r.IntN(3) == 0 {
				size = r.IntN(len(m.b) + 1)
			}
			err = f.Truncate(ctx, int64(size))
			m.truncate(size)
		case op < 86: // size
			counts["size"]++
			var sz int64
			if sz, err = f.Size(ctx); err == nil && sz != int64(len(m.b)) {
				err = fmt.Errorf("size %d, want %d", sz, len(m.b))
			}
		case op < 90: // sync
			counts["sync"]++
			err = f.Sync(ctx)
		case op < 95: // the other node reads: a's locks are called back
			if len(m.b) == 0 {
				continue
			}
			counts["remote read"]++
			err = m.check(ctx, other, randOff(len(m.b)), randLen())
		default: // the other node writes
			counts["remote write"]++
			n, off := randLen(), randOff(maxLen)
			p := buf[:n]
			fill(p, r)
			if _, err = other.WriteAt(ctx, p, int64(off)); err == nil {
				m.write(p, off)
			}
		}
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if i%2000 == 1999 {
			if err := m.check(ctx, f, 0, len(m.b)+1); err != nil {
				t.Fatalf("op %d: whole file: %v", i, err)
			}
		}
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.check(ctx, other, 0, len(m.b)+100); err != nil {
		t.Fatalf("at the end, from the other node: %v", err)
	}
	t.Logf("%d ops %v, final size %d", ops, counts, len(m.b))
}

// fsxSeed is the exercisers' seed: NACRE_FSX_SEED, or def.
func fsxSeed(def uint64) uint64 {
	if s := os.Getenv("NACRE_FSX_SEED"); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			return n
		}
	}
	return def
}

func fsxOps(def int) int {
	if s := os.Getenv("NACRE_FSX_OPS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return def
}

// TestFSX: 20,000 random operations on a file striped over 4 OSTs, byte
// for byte against a model (NACRE_FSX_OPS=100000 for a longer run,
// NACRE_FSX_SEED for another sequence).
func TestFSX(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 2, Dirs: memOSTs(t, 4)})
	a := newNode(t, c, 0, osc.DefaultConfig())
	b := newNode(t, c, 1, osc.DefaultConfig())
	ctx := ctxT(t, time.Minute)
	l, err := c.PlainLayout(ctx, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	fsx(t, openFile(t, l, a), openFile(t, l, b), fsxSeed(1), fsxOps(20000), 1<<20)
	for i, o := range a.OSCs {
		t.Logf("ost%d: %+v", i, o.Stats())
	}
}

// TestFSXComposite: the same over a progressive layout: 1 stripe of
// 64 KiB up to 256 KiB, then 4 stripes of 128 KiB; small RPCs and cache.
func TestFSXComposite(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 2, Dirs: memOSTs(t, 4)})
	cfg := osc.DefaultConfig()
	cfg.MaxPagesPerRPC, cfg.MaxRPCsInFlight, cfg.MaxDirtyMB, cfg.MaxCachedMB, cfg.MaxReadAheadMB = 16, 2, 1, 4, 1
	a := newNode(t, c, 0, cfg)
	b := newNode(t, c, 1, cfg)
	ctx := ctxT(t, time.Minute)
	s1, err := c.Striping(ctx, 1, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Striping(ctx, 4, 128<<10)
	if err != nil {
		t.Fatal(err)
	}
	l := layout.Layout{Composite: true, Components: []layout.Component{
		{ID: 1, Pattern: layout.PatternRAID0, Start: 0, End: 256 << 10, RAID0: s1},
		{ID: 2, Pattern: layout.PatternRAID0, Start: 256 << 10, End: layout.EOF, RAID0: s2},
	}}
	fsx(t, openFile(t, l, a), openFile(t, l, b), fsxSeed(2), fsxOps(5000), 2<<20)
}

// TestReadVecHoles: reads without a copy across a component without
// objects (zeros, from the caller's buffer), stripes of two components,
// and the end of the file give the bytes ReadAt gives.
func TestReadVecHoles(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 1})
	a := newNode(t, c, 0, osc.DefaultConfig())
	ctx := ctxT(t, time.Minute)
	s1, err := c.Striping(ctx, 2, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	s3, err := c.Striping(ctx, 4, 128<<10)
	if err != nil {
		t.Fatal(err)
	}
	l := layout.Layout{Composite: true, Components: []layout.Component{
		{ID: 1, Pattern: layout.PatternRAID0, Start: 0, End: 256 << 10, RAID0: s1},
		{ID: 2, Pattern: layout.PatternRAID0, Start: 256 << 10, End: 1 << 20, RAID0: layout.RAID0{StripeCount: 1, StripeSize: 64 << 10}},
		{ID: 3, Pattern: layout.PatternRAID0, Start: 1 << 20, End: layout.EOF, RAID0: s3},
	}}
	f := openFile(t, l, a)
	var m model
	r := rand.New(rand.NewPCG(9, 9))
	for _, w := range []struct{ off, n int }{{100, 200 << 10}, {1<<20 + 7, 700 << 10}} {
		p := make([]byte, w.n)
		fill(p, r)
		if _, err := f.WriteAt(ctx, p, int64(w.off)); err != nil {
			t.Fatal(err)
		}
		m.write(p, w.off)
	}
	for _, rd := range []struct{ off, n int }{
		{0, 4096}, {50, 300 << 10}, {200 << 10, 1 << 20}, {0, len(m.b) + 5000}, {len(m.b) - 3, 100}, {1<<20 - 1, 2},
	} {
		if err := m.check(ctx, f, rd.off, rd.n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTwoClientsSeeEachOther: whatever one client wrote (and got back from
// WriteAt), the other reads right after, whichever way, without a sync:
// the lock moves, the writer's blocking hook writes its dirty pages back,
// the reader's cache of the range is dropped.
func TestTwoClientsSeeEachOther(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 2})
	a := newNode(t, c, 0, osc.DefaultConfig())
	b := newNode(t, c, 1, osc.DefaultConfig())
	ctx := ctxT(t, time.Minute)
	l, err := c.PlainLayout(ctx, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	files := []*lov.File{openFile(t, l, a), openFile(t, l, b)}
	m := &model{}
	r := rand.New(rand.NewPCG(3, 3))
	for i := range 300 {
		w := files[i%2]
		rd := files[(i+1)%2]
		n, off := 1+r.IntN(200<<10), r.IntN(1<<20)
		p := make([]byte, n)
		fill(p, r)
		if _, err := w.WriteAt(ctx, p, int64(off)); err != nil {
			t.Fatal(err)
		}
		m.write(p, off)
		// The reader looks at the whole file: every byte is the latest.
		if err := m.check(ctx, rd, 0, len(m.b)+10); err != nil {
			t.Fatalf("round %d: client %d after client %d wrote [%d,+%d): %v", i, (i+1)%2, i%2, off, n, err)
		}
		if i%50 == 0 { // and a truncate from one shows on the other
			size := r.IntN(len(m.b))
			if err := rd.Truncate(ctx, int64(size)); err != nil {
				t.Fatal(err)
			}
			m.truncate(size)
			if err := m.check(ctx, w, 0, len(m.b)+10); err != nil {
				t.Fatalf("round %d: after a truncate to %d on the other client: %v", i, size, err)
			}
		}
	}
}

// TestReaderNeverStale: one client rewrites random runs of sectors of a
// region over and over, stamping a new version number in every 512-byte
// sector it writes, and publishes each sector's version once WriteAt
// returns; another client reads the whole region at the same time. Every
// sector it reads carries a version at least as new as the one published
// when its read began (it never sees stale cached data), and no sector is
// torn.
func TestReaderNeverStale(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 2})
	a := newNode(t, c, 0, osc.DefaultConfig())
	b := newNode(t, c, 1, osc.DefaultConfig())
	ctx := ctxT(t, 2*time.Minute)
	l, err := c.PlainLayout(ctx, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := openFile(t, l, a), openFile(t, l, b)
	const region, sector = 512 << 10, 512
	const sectors = region / sector
	stamp := func(p []byte, v uint64, s int) {
		for j := 0; j < sector; j += 8 {
			x := v<<32 | uint64(s)
			for k := range 8 {
				p[j+k] = byte(x >> (8 * k))
			}
		}
	}
	all := make([]byte, region)
	for s := range sectors {
		stamp(all[s*sector:], 1, s)
	}
	if _, err := fa.WriteAt(ctx, all, 0); err != nil {
		t.Fatal(err)
	}
	published := make([]atomic.Uint64, sectors)
	for s := range published {
		published[s].Store(1)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	versions := 1
	go func() {
		r := rand.New(rand.NewPCG(5, 5))
		for v := uint64(2); ; v++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			s0 := r.IntN(sectors)
			s1 := s0 + 1 + r.IntN(min(sectors-s0, 300))
			p := make([]byte, (s1-s0)*sector)
			for s := s0; s < s1; s++ {
				stamp(p[(s-s0)*sector:], v, s)
			}
			if _, err := fa.WriteAt(ctx, p, int64(s0*sector)); err != nil {
				done <- err
				return
			}
			for s := s0; s < s1; s++ {
				published[s].Store(v)
			}
			versions = int(v)
		}
	}()
	buf := make([]byte, region)
	floor := make([]uint64, sectors)
	want := make([]byte, sector)
	const reads = 150
	for i := range reads {
		for s := range floor {
			floor[s] = published[s].Load()
		}
		if _, err := fb.ReadAt(ctx, buf, 0); err != nil {
			close(stop)
			t.Fatal(err)
		}
		for s := range sectors {
			x := uint64(0)
			for k := range 8 {
				x |= uint64(buf[s*sector+k]) << (8 * k)
			}
			v, idx := x>>32, x&0xffffffff
			stamp(want, v, s)
			if idx != uint64(s) || v < floor[s] || !bytes.Equal(buf[s*sector:(s+1)*sector], want) {
				close(stop)
				t.Fatalf("read %d: sector %d holds version %d (index %d), published was %d", i, s, v, idx, floor[s])
			}
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d reads while %d versions were written", reads, versions)
}

// TestAppendsInterleave: two clients append records to one file at once
// (each record names its writer and sequence number); no record is lost
// or overlaps another, and each sits at the offset Append returned.
func TestAppendsInterleave(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 2})
	nodes := []*clienttest.Node{newNode(t, c, 0, osc.DefaultConfig()), newNode(t, c, 1, osc.DefaultConfig())}
	ctx := ctxT(t, 2*time.Minute)
	l, err := c.PlainLayout(ctx, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	const perClient = 150
	type rec struct {
		at   int64
		data []byte
	}
	recs := make([][]rec, 2)
	errs := make(chan error, 2)
	for w, n := range nodes {
		f := openFile(t, l, n)
		go func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for i := range perClient {
				size := 16 + r.IntN(20<<10)
				p := make([]byte, size)
				fill(p, r)
				copy(p, fmt.Sprintf("%d:%06d|", w, i))
				_, at, err := f.Append(ctx, p)
				if err != nil {
					errs <- err
					return
				}
				recs[w] = append(recs[w], rec{at, p})
			}
			errs <- nil
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	f := openFile(t, l, nodes[0])
	size, err := f.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, size)
	if _, err := f.ReadAt(ctx, content, 0); err != nil {
		t.Fatal(err)
	}
	var total int64
	covered := make([]bool, size)
	for w := range recs {
		for i, rc := range recs[w] {
			total += int64(len(rc.data))
			if rc.at+int64(len(rc.data)) > size {
				t.Fatalf("client %d record %d at %d past the end %d", w, i, rc.at, size)
			}
			if !bytes.Equal(content[rc.at:rc.at+int64(len(rc.data))], rc.data) {
				t.Fatalf("client %d record %d at %d: overwritten or lost", w, i, rc.at)
			}
			for j := rc.at; j < rc.at+int64(len(rc.data)); j++ {
				if covered[j] {
					t.Fatalf("client %d record %d at %d overlaps another", w, i, rc.at)
				}
				covered[j] = true
			}
		}
	}
	if total != size {
		t.Fatalf("records hold %d bytes, the file is %d", total, size)
	}
}

// TestReadRacesTruncate: one client cuts a file and writes it back to
// its full length over and over; another reads it to the end meanwhile.
// Every read returns a prefix of the file's content — never zeros where
// the truncate cut, since the reader decides the size under its locks.
func TestReadRacesTruncate(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 2})
	a := newNode(t, c, 0, osc.DefaultConfig())
	b := newNode(t, c, 1, osc.DefaultConfig())
	ctx := ctxT(t, 2*time.Minute)
	l, err := c.PlainLayout(ctx, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := openFile(t, l, a), openFile(t, l, b)
	const full = 1 << 20
	content := make([]byte, full)
	for i := range content {
		content[i] = byte(i*7 + 1) // never 0
	}
	if _, err := fa.WriteAt(ctx, content, 0); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			cut := r.IntN(full)
			if err := fa.Truncate(ctx, int64(cut)); err != nil {
				done <- err
				return
			}
			if _, err := fa.WriteAt(ctx, content[cut:], int64(cut)); err != nil {
				done <- err
				return
			}
		}
	}()
	buf := make([]byte, full+4096)
	for i := range 150 {
		n, err := fb.ReadAt(ctx, buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			close(stop)
			t.Fatal(err)
		}
		if n > full || !bytes.Equal(buf[:n], content[:n]) {
			close(stop)
			t.Fatalf("read %d: %d bytes that are not a prefix of the file", i, n)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentRegions: goroutines of one client each own a region of a
// striped file (regions share objects and pages at their edges) and write
// and check it at random, while another client keeps reading the whole
// file, calling the first client's locks back; every worker always reads
// back exactly what it wrote.
func TestConcurrentRegions(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 2, Dirs: memOSTs(t, 4)})
	a := newNode(t, c, 0, osc.DefaultConfig())
	b := newNode(t, c, 1, osc.DefaultConfig())
	ctx := ctxT(t, 2*time.Minute)
	l, err := c.PlainLayout(ctx, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := openFile(t, l, a), openFile(t, l, b)
	const workers, region, ops = 4, 300 << 10, 800 // regions end mid-page and mid-stripe
	errs := make(chan error, workers)
	stop := make(chan struct{})
	for w := range workers {
		go func() {
			r := rand.New(rand.NewPCG(uint64(w), 77))
			base := w * region
			model := make([]byte, region)
			buf := make([]byte, 64<<10)
			for i := range ops {
				off, n := r.IntN(region), 1+r.IntN(len(buf))
				n = min(n, region-off)
				if r.IntN(2) == 0 {
					fill(buf[:n], r)
					if _, err := fa.WriteAt(ctx, buf[:n], int64(base+off)); err != nil {
						errs <- err
						return
					}
					copy(model[off:], buf[:n])
					continue
				}
				k, err := fa.ReadAt(ctx, buf[:n], int64(base+off))
				if err != nil && !errors.Is(err, io.EOF) {
					errs <- err
					return
				}
				// The last region may end past the end of the file: what
				// is not there yet is zeros in the model.
				if !bytes.Equal(buf[:k], model[off:off+k]) || !bytes.Equal(model[off+k:off+n], make([]byte, n-k)) {
					errs <- fmt.Errorf("worker %d op %d: region bytes [%d,+%d) differ (%d read)", w, i, off, n, k)
					return
				}
			}
			errs <- nil
		}()
	}
	go func() {
		buf := make([]byte, workers*region)
		for {
			select {
			case <-stop:
				return
			default:
			}
			fb.ReadAt(ctx, buf, 0)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer close(stop)
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestStripedReadAhead: a file striped over 4 objects read sequentially
// is read ahead on all four. The per-file read-ahead window is split
// between the objects; when each object had the whole window, the first
// two took the client's whole read-ahead budget and the others read every
// page on demand, one RPC per read.
func TestStripedReadAhead(t *testing.T) {
	const (
		stripe = 1 << 20
		size   = 32 << 20
	)
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 2, Dirs: memOSTs(t, 4)})
	cfg := osc.DefaultConfig()
	cfg.MaxPagesPerRPC = stripe / osc.PageSize
	cfg.MaxReadAheadMB, cfg.MaxReadAheadPerFileMB = 8, 8
	w, r := newNode(t, c, 0, cfg), newNode(t, c, 1, cfg)
	ctx := ctxT(t, time.Minute)
	l, err := c.PlainLayout(ctx, 4, stripe)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	fill(want, rand.New(rand.NewPCG(7, 7)))
	fw := openFile(t, l, w)
	if _, err := fw.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := fw.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fr := openFile(t, l, r)
	got := make([]byte, size)
	for off := 0; off < size; off += stripe {
		if _, err := fr.ReadAt(ctx, got[off:off+stripe], int64(off)); err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the file read back differs from what was written")
	}
	perObject := uint64(size / 4 / osc.PageSize)
	for i, o := range r.OSCs {
		st := o.Stats()
		t.Logf("ost%d: %d misses, %d pages read ahead, %d hits, %d read RPCs", i, st.CacheMisses, st.ReadAheadPages, st.ReadAheadHits, st.ReadRPCs)
		// The first two reads of an object find nothing cached: the
		// second is what shows the object is read sequentially.
		if st.CacheMisses > 2*stripe/osc.PageSize || st.ReadAheadHits < perObject/2 {
			t.Errorf("ost%d: %d of %d pages missed the cache, %d came from read-ahead", i, st.CacheMisses, perObject, st.ReadAheadHits)
		}
	}
}

// TestTruncateLaterComponentFewerStripes: a truncate into a progressive
// layout's first component empties the objects of a later one rather than
// extending them to where the size would fall in their own geometry: with
// one stripe there, that lay past what an object may hold, the truncate
// failed EFBIG, and the other objects were cut already.
func TestTruncateLaterComponentFewerStripes(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 1})
	a := newNode(t, c, 0, osc.DefaultConfig())
	ctx := ctxT(t, time.Minute)
	wide, err := c.Striping(ctx, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	one, err := c.Striping(ctx, 1, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	const TiB = 1 << 40
	f := openFile(t, layout.Layout{Composite: true, Components: []layout.Component{
		{ID: 1, Pattern: layout.PatternRAID0, Start: 0, End: 32 * TiB, RAID0: wide},
		{ID: 2, Pattern: layout.PatternRAID0, Start: 32 * TiB, End: layout.EOF, RAID0: one},
	}}, a)
	if _, err := f.WriteAt(ctx, []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(ctx, 20*TiB); err != nil {
		t.Fatalf("truncate to 20 TiB (the layout holds %d bytes): %v", f.MaxBytes(), err)
	}
	if size, err := f.Size(ctx); err != nil || size != 20*TiB {
		t.Fatalf("size after the truncate: %d %v", size, err)
	}
	got := make([]byte, 5)
	if _, err := f.ReadAt(ctx, got, 0); err != nil || string(got) != "hello" {
		t.Fatalf("data after the truncate: %q %v", got, err)
	}
}

// TestPunchOverDirtyTail: a hole punched (KEEP_SIZE) over the end of a
// file whose last bytes are still dirty in the writer's cache keeps the
// size the writer made. The punch dropped those pages unsent, so the OST
// never learnt the size: once the writer's lock went, the file was cut to
// the punch's start.
func TestPunchOverDirtyTail(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 2, Nodes: 2})
	a := newNode(t, c, 0, osc.DefaultConfig())
	b := newNode(t, c, 1, osc.DefaultConfig())
	ctx := ctxT(t, time.Minute)
	l, err := c.PlainLayout(ctx, 1, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	f, g := openFile(t, l, a), openFile(t, l, b)
	const size = 100000
	if _, err := f.WriteAt(ctx, bytes.Repeat([]byte{1}, size), 0); err != nil { // dirty in a's cache
		t.Fatal(err)
	}
	if err := f.Fallocate(ctx, 50000, 150000, true, true); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// b's write calls a's lock back: the size is the OST's from now on.
	if _, err := g.WriteAt(ctx, []byte{2}, 0); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]*lov.File{"writer": f, "other": g} {
		got := make([]byte, size+10)
		n, err := h.ReadAt(ctx, got, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		want := append(append([]byte{2}, bytes.Repeat([]byte{1}, 50000-1)...), make([]byte, size-50000)...)
		if n != size || !bytes.Equal(got[:n], want) {
			t.Fatalf("%s reads %d bytes after the punch (want %d: ones to 50000, zeros to %d)", name, n, size, size)
		}
	}
}

// TestOneClientAppendsAndTruncates: the goroutines of one client are
// ordered as the kernel's inode lock orders a local file's callers: two
// appenders never take the same offset, and a read that races a truncate
// returns the file before it or after it, never zeros from objects cut
// after the read decided the size. Extent locks alone did not order
// them: the lock client lends a lock it holds to every goroutine.
func TestOneClientAppendsAndTruncates(t *testing.T) {
	c := startCluster(t, clienttest.Options{OSTs: 4, Nodes: 1})
	a := newNode(t, c, 0, osc.DefaultConfig())
	ctx := ctxT(t, 2*time.Minute)
	l, err := c.PlainLayout(ctx, 4, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("appends", func(t *testing.T) {
		f := openFile(t, l, a)
		const workers, per = 4, 100
		type rec struct {
			at   int64
			data []byte
		}
		recs := make([][]rec, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range per {
					p := bytes.Repeat([]byte(fmt.Sprintf("<%d:%03d>", w, i)), 1+(w*per+i)%40)
					_, at, err := f.Append(ctx, p)
					if err != nil {
						t.Error(err)
						return
					}
					recs[w] = append(recs[w], rec{at, p})
				}
			})
		}
		wg.Wait()
		size, err := f.Size(ctx)
		if err != nil {
			t.Fatal(err)
		}
		content := make([]byte, size)
		if _, err := f.ReadAt(ctx, content, 0); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		total := int64(0)
		for w := range recs {
			for i, r := range recs[w] {
				total += int64(len(r.data))
				if end := r.at + int64(len(r.data)); end > size || !bytes.Equal(content[r.at:end], r.data) {
					t.Fatalf("append %d of goroutine %d at %d: overwritten", i, w, r.at)
				}
			}
		}
		if total != size {
			t.Fatalf("appends of %d bytes made a file of %d", total, size)
		}
	})
	t.Run("read-races-truncate", func(t *testing.T) {
		f := openFile(t, l, a)
		const full = 1 << 20
		content := make([]byte, full)
		for i := range content {
			content[i] = byte(i*7 + 1) // never 0
		}
		buf := make([]byte, full+4096)
		for round := range 50 {
			if _, err := f.WriteAt(ctx, content, 0); err != nil {
				t.Fatal(err)
			}
			cut := (round*7919 + 1) % (full / 2)
			var wg sync.WaitGroup
			var terr error
			wg.Go(func() { terr = f.Truncate(ctx, int64(cut)) })
			n, err := f.ReadAt(ctx, buf, 0)
			wg.Wait()
			if terr != nil {
				t.Fatal(terr)
			}
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			if (n != full && n != cut) || !bytes.Equal(buf[:n], content[:n]) {
				t.Fatalf("round %d: a read racing a truncate to %d of %d bytes read %d, not the file before or after it", round, cut, full, n)
			}
		}
	})
}

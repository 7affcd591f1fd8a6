package posix_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/fid"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/hsm/hsmtest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// startCoordinators and startAgent are hsmtest's.
var (
	startCoordinators = hsmtest.StartCoordinators
	startAgent        = hsmtest.StartAgent
)

// countingHandler counts the actions run per FID and kind.
type countingHandler struct {
	h     hsm.Handler
	mu    sync.Mutex
	runs  map[string]int
	log   []string
	delay time.Duration
}

func (c *countingHandler) Handle(ctx context.Context, a *hsmv1.Action, progress func(done, total uint64)) (string, error) {
	c.mu.Lock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[fmt.Sprint(a.Kind, hsm.FIDFrom(a.Fid))]++
	c.log = append(c.log, fmt.Sprintf("%s id %d attempts %d at %s", a.Agent, a.Id, a.Attempts, time.Now().Format("05.000")))
	c.mu.Unlock()
	if c.delay > 0 {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(c.delay):
		}
	}
	return c.h.Handle(ctx, a, progress)
}

func state(t testing.TB, fsys *client.FS, f fid.FID) string {
	t.Helper()
	st, err := fsys.HSMState(context.Background(), client.Root(), f)
	if err != nil {
		t.Fatalf("hsm state of %v: %v", f, err)
	}
	return hsm.FormatState(st.Flags, st.ArchiveID)
}

func waitAll(t testing.TB, ctx context.Context, hc *hsm.Client, ids []uint64) {
	t.Helper()
	for _, id := range ids {
		if err := hc.Wait(ctx, id); err != nil {
			t.Fatalf("action %d: %v", id, err)
		}
	}
}

// TestHSMEndToEnd: two copytool agents archive files of varied sizes,
// they are released (the OSTs' space comes back), read back through the
// library (transparent restore) byte for byte; a file written after its
// archive is dirty and cannot be released; states are right at every
// step; bad requests fail clearly and change nothing.
func TestHSMEndToEnd(t *testing.T) {
	const nFiles = 200
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	user := c.Mount(0)
	_, addrs := startCoordinators(t, 2, 20*time.Second)
	archive := t.TempDir()
	ca := &countingHandler{}
	cb := &countingHandler{}
	startAgent(t, c.Mount(1), addrs, "agent-a", archive, func(h hsm.Handler) hsm.Handler { ca.h = h; return ca })
	startAgent(t, c.Mount(2), addrs, "agent-b", archive, func(h hsm.Handler) hsm.Handler { cb.h = h; return cb })
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	user.SetHSMRestorer(hc)
	defer user.SetHSMRestorer(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cred := client.Root()

	rng := rand.New(rand.NewPCG(3, 4))
	data := map[fid.FID][]byte{}
	var fids []fid.FID
	var total int64
	start := time.Now()
	for i := range nFiles {
		size := []int{0, 1, 4095, 4096, 65537, 300 << 10, 1<<20 + 3}[i%7] + rng.IntN(1000)*(i%3)
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		f, _, err := user.Create(ctx, cred, user.Root(), fmt.Sprintf("f%03d", i), syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 {
			if _, _, err := f.WriteAt(ctx, b, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		data[f.FID()] = b
		total += int64(len(b))
		fids = append(fids, f.FID())
	}
	if got := state(t, user, fids[0]); got != "" {
		t.Fatalf("new file: state %q", got)
	}
	t.Logf("created %d files in %v", nFiles, time.Since(start))

	start = time.Now()
	ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, fids...)
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, hc, ids)
	t.Logf("archived %d files in %v (agent a %d, b %d)", nFiles, time.Since(start), len(ca.runs), len(cb.runs))
	if len(ca.runs) == 0 || len(cb.runs) == 0 {
		t.Errorf("one agent did everything: a %d, b %d", len(ca.runs), len(cb.runs))
	}
	for _, f := range fids {
		if got := state(t, user, f); got != "exists archived, archive_id:1" {
			t.Fatalf("%v after archive: %q", f, got)
		}
	}

	// A file written after its archive is dirty and stays.
	dirty := fids[5]
	f, _, err := user.Open(ctx, cred, dirty, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.WriteAt(ctx, []byte("changed"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	copy(data[dirty], "changed")
	if got := state(t, user, dirty); got != "exists dirty archived, archive_id:1" {
		t.Fatalf("written after archive: %q", got)
	}
	if _, err := user.HSMRelease(ctx, cred, dirty); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("release of a dirty file: %v, want EBUSY", err)
	}

	before := c.OSTObjectBytes()
	if before < total*9/10 {
		t.Fatalf("the OSTs hold %d bytes of objects, %d bytes written", before, total)
	}
	start = time.Now()
	for _, f := range fids {
		if f == dirty {
			continue
		}
		if _, err := user.HSMRelease(ctx, cred, f); err != nil {
			t.Fatalf("release %v: %v", f, err)
		}
		if got := state(t, user, f); got != "exists released archived, archive_id:1" {
			t.Fatalf("%v after release: %q", f, got)
		}
		a, err := user.Getattr(ctx, cred, f)
		if err != nil || a.Size != uint64(len(data[f])) {
			t.Fatalf("%v released: size %d, want %d (%v)", f, a.Size, len(data[f]), err)
		}
	}
	t.Logf("released %d files in %v", nFiles-1, time.Since(start))
	var after int64
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if after = c.OSTObjectBytes(); after <= before-before*8/10 {
			break
		}
	}
	t.Logf("OST bytes: %d before release, %d after", before, after)
	if after > before-before*8/10 {
		t.Errorf("OST space not returned: %d bytes before release, %d after", before, after)
	}

	// Transparent restore: reads through the library get the bytes.
	start = time.Now()
	var wg sync.WaitGroup
	var bad atomic.Int32
	sem := make(chan struct{}, 16)
	for _, fd := range fids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f, a, err := user.Open(ctx, cred, fd, syscall.O_RDONLY)
			if err != nil {
				t.Errorf("open %v: %v", fd, err)
				bad.Add(1)
				return
			}
			defer f.Close(ctx)
			want := data[fd]
			got := make([]byte, len(want)+10)
			n, err := f.ReadAt(ctx, got, 0)
			if (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(got[:n], want) || a.Size != uint64(len(want)) {
				t.Errorf("read %v: %d bytes (size %d), want %d: %v", fd, n, a.Size, len(want), err)
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.FailNow()
	}
	t.Logf("read back %d files (transparent restore) in %v", nFiles, time.Since(start))
	for _, f := range fids {
		want := "exists archived, archive_id:1"
		if f == dirty {
			want = "exists dirty archived, archive_id:1"
		}
		if got := state(t, user, f); got != want {
			t.Fatalf("%v after restore: %q, want %q", f, got, want)
		}
	}

	// Bad input.
	dir, err := user.Mkdir(ctx, cred, user.Root(), "dir", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	ids, err = hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, dir.FID, fid.FID{Seq: fids[0].Seq, Oid: 0xfffff})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"invalid argument", "no such file"} {
		err := hc.Wait(ctx, ids[i])
		if !errors.Is(err, hsm.ErrActionFailed) || !strings.Contains(err.Error(), want) {
			t.Errorf("archive of bad FID %d: %v, want failure %q", i, err, want)
		}
	}
	if _, err := user.HSMState(ctx, cred, dir.FID); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("hsm state of a directory: %v, want EINVAL", err)
	}
	nf, _, err := user.Create(ctx, cred, user.Root(), "never", syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	nf.Close(ctx)
	if _, err := user.HSMRelease(ctx, cred, nf.FID()); !errors.Is(err, syscall.EPERM) {
		t.Errorf("release of a never-archived file: %v, want EPERM", err)
	}
	if got := state(t, user, nf.FID()); got != "" {
		t.Errorf("never-archived file after a refused release: %q", got)
	}
	if _, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 0, nf.FID()); err == nil {
		t.Errorf("archive to archive id 0 accepted")
	}
}

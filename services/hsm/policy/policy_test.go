package policy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/clustertest"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/hsm/hsmtest"
	"github.com/nacrefs/nacre/services/hsm/posix"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// TestPolicy: the engine, reading the changelog as cl1, archives files
// left alone long enough, releases archived files while the OSTs are above
// the high watermark (here: always), re-archives a file written after
// archive, removes the archive copy of a deleted file, and clears the
// changelog as it goes; a released file reads back byte for byte.
func TestPolicy(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	fs, agentFS := c.Mount(0), c.Mount(1)
	_, addrs := hsmtest.StartCoordinators(t, 1, 5*time.Second)
	archive := t.TempDir()
	hsmtest.StartAgent(t, agentFS, addrs, "agent-1", archive, nil)
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	fs.SetHSMRestorer(hc)
	store := c.Servers()[0].MDS.MDTs()[0].Store()
	user, err := store.ChangelogRegister()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := client.Root()
	var fids []client.FID
	data := map[client.FID][]byte{}
	for i := range 6 {
		f, _, err := fs.Create(ctx, root, fs.Root(), fmt.Sprint("p", i), syscall.O_RDWR|syscall.O_CREAT, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := bytes.Repeat([]byte{byte('a' + i)}, 100<<10+i)
		if _, _, err := f.WriteAt(ctx, b, 0); err != nil {
			t.Fatal(err)
		}
		f.Close(ctx)
		fids = append(fids, f.FID())
		data[f.FID()] = b
	}
	e, err := New(Config{FS: fs, HSM: hc, User: user.ID, Rules: Rules{ArchiveID: 1, ArchiveAfter: time.Hour, RemoveDeleted: true}})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is old enough yet.
	st, err := e.Step(ctx)
	if err != nil || st.Records == 0 || st.Archived != 0 {
		t.Fatalf("first step: %+v %v", st, err)
	}
	// An hour later, every file is archived.
	e.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if st, err = e.Step(ctx); err != nil || st.Archived != len(fids) {
		t.Fatalf("archive step: %+v %v", st, err)
	}
	waitFlags := func(f client.FID, want uint32) {
		t.Helper()
		for {
			h, err := fs.HSMState(ctx, root, f)
			if err == nil && h.Flags&want == want {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%v never had flags %#x: %+v %v", f, want, h, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, f := range fids {
		waitFlags(f, mdc.HSMExists|mdc.HSMArchived)
	}
	// The changelog was cleared up to what the engine read.
	if us := store.ChangelogUsers(); len(us) != 1 || us[0].Cleared == 0 {
		t.Fatalf("changelog users %+v", us)
	}
	// Above the high watermark: release (the watermarks are tiny, so all).
	e.cfg.HighWatermark, e.cfg.LowWatermark = 0.0002, 0.0001
	if st, err = e.Step(ctx); err != nil || st.Released != len(fids) {
		t.Fatalf("release step: %+v %v", st, err)
	}
	for _, f := range fids {
		waitFlags(f, mdc.HSMReleased)
	}
	// A released file reads back (restored on open).
	g, _, err := fs.Open(ctx, root, fids[0], syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data[fids[0]]))
	if n, _ := g.ReadAt(ctx, got, 0); n != len(got) || !bytes.Equal(got, data[fids[0]]) {
		t.Fatalf("read back %d bytes, equal %v", n, bytes.Equal(got[:n], data[fids[0]][:n]))
	}
	// Written after archive: dirty, and archived again by the next steps.
	if _, _, err := g.WriteAt(ctx, []byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	g.Close(ctx)
	waitFlags(fids[0], mdc.HSMDirty)
	e.cfg.HighWatermark, e.cfg.LowWatermark = 0, 0
	if st, err = e.Step(ctx); err != nil || st.Archived != 1 {
		t.Fatalf("re-archive step: %+v %v", st, err)
	}
	// Deleted: its archive copy goes.
	if err := fs.Unlink(ctx, root, fs.Root(), "p5"); err != nil {
		t.Fatal(err)
	}
	if st, err = e.Step(ctx); err != nil || st.Removed != 1 {
		t.Fatalf("remove step: %+v %v", st, err)
	}
	acts, err := hc.Actions(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var removes []uint64
	for _, a := range acts {
		if a.Kind == hsmv1.ActionKind_ACTION_KIND_REMOVE && hsm.FIDFrom(a.Fid) == fids[5] {
			removes = append(removes, a.Id)
		}
	}
	if len(removes) != 1 {
		t.Fatalf("%d REMOVE actions for the deleted file", len(removes))
	}
	// The copytool removes the deleted file's copy and its shadow link.
	if err := hc.Wait(ctx, removes[0]); err != nil {
		t.Fatalf("remove the copy of the deleted file: %v", err)
	}
	ct, err := posix.New(posix.Config{FS: agentFS, Root: archive, Logger: clustertest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ct.Path(fids[5]), filepath.Join(ct.ShadowRoot(), "p5")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s after the remove: %v", p, err)
		}
	}
	// Bad configuration.
	if _, err := New(Config{FS: fs, HSM: hc, User: user.ID, Rules: Rules{HighWatermark: 50, LowWatermark: 60}}); err == nil {
		t.Fatal("low watermark above high accepted")
	}
}

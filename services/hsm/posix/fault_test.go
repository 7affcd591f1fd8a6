package posix_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/mds/mdd"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/hsm/hsmtest"
	"github.com/nacrefs/nacre/services/hsm/posix"
)

// fileBytes are the bytes makeFiles writes into each file.
func fileBytes(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

func makeFiles(t testing.TB, ctx context.Context, fsys *client.FS, prefix string, n, size int) []fid.FID {
	t.Helper()
	var out []fid.FID
	b := fileBytes(size)
	for i := range n {
		f, _, err := fsys.Create(ctx, client.Root(), fsys.Root(), fmt.Sprintf("%s%03d", prefix, i), syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.WriteAt(ctx, b, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		out = append(out, f.FID())
	}
	return out
}

// TestHSMAgentKilledMidArchive: an agent dies while it archives; the
// action times out and the other agent does it. An agent reporting on an
// action it does not own is refused and changes nothing.
func TestHSMAgentKilledMidArchive(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	user := c.Mount(0)
	_, addrs := startCoordinators(t, 1, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fids := makeFiles(t, ctx, user, "k", 1, 100<<10)
	archive := t.TempDir()
	slow := &countingHandler{delay: time.Hour}
	stopA := startAgent(t, c.Mount(1), addrs, "agent-a", archive, func(h hsm.Handler) hsm.Handler { slow.h = h; return slow })
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, fids...)
	if err != nil {
		t.Fatal(err)
	}
	for {
		a, err := hc.Action(ctx, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if a.State == hsmv1.ActionState_ACTION_STATE_STARTED {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A rogue agent reports on agent-a's action: refused.
	cc, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := hsmv1.NewCoordinatorClient(cc).Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&hsmv1.AgentRequest{Msg: &hsmv1.AgentRequest_Register{Register: &hsmv1.Register{Uuid: "rogue", ArchiveIds: []uint32{99}}}})
	if m, err := st.Recv(); err != nil || m.GetRegistered() == nil {
		t.Fatalf("rogue registration: %v %v", m, err)
	}
	st.Send(&hsmv1.AgentRequest{Msg: &hsmv1.AgentRequest_Done{Done: &hsmv1.Done{Id: ids[0]}}})
	st.Send(&hsmv1.AgentRequest{Msg: &hsmv1.AgentRequest_Progress{Progress: &hsmv1.Progress{Id: 12345}}})
	for i, want := range []syscall.Errno{syscall.EPERM, syscall.ENOENT} {
		m, err := st.Recv()
		if err != nil || m.GetAck() == nil || syscall.Errno(m.GetAck().Errno) != want {
			t.Fatalf("rogue report %d: %v %v, want errno %v", i, m, err, want)
		}
	}
	st.CloseSend()
	if a, _ := hc.Action(ctx, ids[0]); a.State != hsmv1.ActionState_ACTION_STATE_STARTED || a.Agent != "agent-a" {
		t.Fatalf("after the rogue's report: %v", a)
	}

	stopA() // killed mid-archive
	start := time.Now()
	fast := &countingHandler{}
	startAgent(t, c.Mount(2), addrs, "agent-b", archive, func(h hsm.Handler) hsm.Handler { fast.h = h; return fast })
	if err := hc.Wait(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	a, err := hc.Action(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("retried by %s after %v, attempts %d", a.Agent, time.Since(start), a.Attempts)
	if a.Agent != "agent-b" || a.Attempts != 2 {
		t.Fatalf("action after the agent died: %v", a)
	}
	if got := state(t, user, fids[0]); got != "exists archived, archive_id:1" {
		t.Fatalf("state %q", got)
	}
}

// TestHSMCoordinatorFailover: the active coordinator stops while agents
// work through a queue; the standby takes over, and every action is done
// exactly once.
func TestHSMCoordinatorFailover(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	user := c.Mount(0)
	coords, addrs := startCoordinators(t, 2, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 40
	fids := makeFiles(t, ctx, user, "c", n, 10<<10)
	archive := t.TempDir()
	ha := &countingHandler{delay: 50 * time.Millisecond}
	hb := &countingHandler{delay: 50 * time.Millisecond}
	startAgent(t, c.Mount(1), addrs, "agent-a", archive, func(h hsm.Handler) hsm.Handler { ha.h = h; return ha })
	startAgent(t, c.Mount(2), addrs, "agent-b", archive, func(h hsm.Handler) hsm.Handler { hb.h = h; return hb })
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, fids...)
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Wait(ctx, ids[5]); err != nil {
		t.Fatal(err)
	}
	var leader, standby *hsmtest.Coord
	for _, co := range coords {
		if co.C.Leader() {
			leader = co
		} else {
			standby = co
		}
	}
	if leader == nil || standby == nil {
		t.Fatal("no leader and standby")
	}
	start := time.Now()
	leader.Stop()
	for !standby.C.Leader() {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the standby did not take over")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("standby took over in %v", time.Since(start))
	waitAll(t, ctx, hc, ids)
	runs := map[string]int{}
	for _, h := range []*countingHandler{ha, hb} {
		h.mu.Lock()
		for k, v := range h.runs {
			runs[k] += v
		}
		h.mu.Unlock()
	}
	if len(runs) != n {
		t.Errorf("%d files archived, want %d", len(runs), n)
	}
	for k, v := range runs {
		if v != 1 {
			t.Errorf("%s done %d times", k, v)
		}
	}
	if t.Failed() {
		t.Logf("stopped the leader at %s; runs: a %v b %v", start.Format("05.000"), ha.log, hb.log)
	}
	as, err := hc.Actions(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != n {
		t.Errorf("%d actions listed, want %d", len(as), n)
	}
	for _, f := range fids {
		if got := state(t, user, f); got != "exists archived, archive_id:1" {
			t.Fatalf("%v: %q", f, got)
		}
	}
}

// TestHSMFailedRestore: a released file whose archive copy is gone fails
// its open with EIO (after the agent's attempts), not a hang; its state
// stays released.
func TestHSMFailedRestore(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	user := c.Mount(0)
	_, addrs := startCoordinators(t, 1, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fids := makeFiles(t, ctx, user, "r", 1, 5000)
	archive := t.TempDir()
	startAgent(t, c.Mount(1), addrs, "agent-a", archive, nil)
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	user.SetHSMRestorer(hc)
	defer user.SetHSMRestorer(nil)
	ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, fids...)
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, hc, ids)
	if _, err := user.HSMRelease(ctx, client.Root(), fids[0]); err != nil {
		t.Fatal(err)
	}
	ct, _ := posixNew(user, archive)
	if err := removeAll(ct.Path(fids[0])); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = user.Open(ctx, client.Root(), fids[0], syscall.O_RDONLY)
	if !errorsIs(err, syscall.EIO) {
		t.Fatalf("open with a lost archive copy: %v, want EIO", err)
	}
	t.Logf("open failed after %v: %v", time.Since(start), err)
	if got := state(t, user, fids[0]); got != "exists released archived, archive_id:1" {
		t.Fatalf("state %q", got)
	}
}

// TestHSMRestoreAcrossMDSRestart: restores are pending (queued while the
// copytool is busy) when the MDS is killed and started again, having lost
// the releases before them (a replay barrier), which the client replays;
// they complete, and the files read back byte for byte.
func TestHSMRestoreAcrossMDSRestart(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, ChildMDS: true})
	user := c.Mount(0)
	_, addrs := startCoordinators(t, 1, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const size = 200 << 10
	fids := makeFiles(t, ctx, user, "m", 4, size)
	archive := t.TempDir()
	slow := &countingHandler{delay: 300 * time.Millisecond}
	startAgent(t, c.Mount(1), addrs, "agent-a", archive, func(h hsm.Handler) hsm.Handler { slow.h = h; return slow })
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	user.SetHSMRestorer(hc)
	defer user.SetHSMRestorer(nil)
	ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, fids...)
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, hc, ids)
	if err := c.ReplayBarrierMDS(ctx); err != nil { // the releases are lost in the restart
		t.Fatal(err)
	}
	for _, f := range fids {
		if _, err := user.HSMRelease(ctx, client.Root(), f); err != nil {
			t.Fatal(err)
		}
	}
	// Restores queue up (the agent takes 300 ms each); the MDS dies under
	// them and comes back. The releases are replayed before any restore
	// goes on: a restarted MDT serves nothing new until every client has
	// replayed.
	if ids, err = hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_RESTORE, 1, fids...); err != nil {
		t.Fatal(err)
	}
	c.KillMDS()
	time.Sleep(500 * time.Millisecond)
	if err := c.RestoreMDS(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartMDS(); err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, hc, ids)
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i * 7)
	}
	for _, f := range fids {
		if got := state(t, user, f); got != "exists archived, archive_id:1" {
			t.Fatalf("%v after the restore: %q", f, got)
		}
		fh, _, err := user.Open(ctx, client.Root(), f, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		n, _ := fh.ReadAt(ctx, got, 0)
		fh.Close(ctx)
		if n != size || !bytesEqual(got, want) {
			t.Fatalf("%v read back %d bytes, equal %v", f, n, bytesEqual(got[:n], want[:n]))
		}
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// archivedSetup is a cluster with one coordinator and one agent, n files
// of size bytes made by user and archived, and user restoring through hc.
type archivedSetup struct {
	c       *clustertest.Cluster
	user    *client.FS
	hc      *hsm.Client
	fids    []fid.FID
	archive string
}

func archivedFiles(t *testing.T, ctx context.Context, prefix string, n, size int) archivedSetup {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	s := archivedSetup{c: c, user: c.Mount(0), archive: t.TempDir()}
	_, addrs := startCoordinators(t, 1, 10*time.Second)
	s.fids = makeFiles(t, ctx, s.user, prefix, n, size)
	startAgent(t, c.Mount(1), addrs, "agent-a", s.archive, nil)
	hc, err := hsm.NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	s.hc = hc
	s.user.SetHSMRestorer(hc)
	t.Cleanup(func() { s.user.SetHSMRestorer(nil) })
	ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, s.fids...)
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, hc, ids)
	return s
}

// TestHSMTruncateReleased: truncating a released file (truncate(2), no
// open) restores it first, as Lustre's ll_setattr_raw does: the file then
// has the truncated size and the archive's bytes up to it, not the whole
// archive copy brought back over the truncate by a later restore.
func TestHSMTruncateReleased(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const size = 5000
	s := archivedFiles(t, ctx, "t", 2, size)
	user, fids := s.user, s.fids
	want := fileBytes(size)
	// One shrinks, one grows (the tail reads as zeros).
	for i, newSize := range []uint64{100, 2 * size} {
		f := fids[i]
		if _, err := user.HSMRelease(ctx, client.Root(), f); err != nil {
			t.Fatal(err)
		}
		if _, err := user.Setattr(ctx, client.Root(), f, client.SetAttr{Valid: mdc.AttrSize, Size: newSize}); err != nil {
			t.Fatalf("truncate %v to %d: %v", f, newSize, err)
		}
		fh, a, err := user.Open(ctx, client.Root(), f, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, newSize+10)
		n, _ := fh.ReadAt(ctx, got, 0)
		fh.Close(ctx)
		exp := make([]byte, newSize)
		copy(exp, want)
		if a.Size != newSize || !bytesEqual(got[:n], exp) {
			t.Errorf("%v truncated to %d while released: size %d, read %d bytes, equal %v", f, newSize, a.Size, n, bytesEqual(got[:min(n, len(exp))], exp[:min(n, len(exp))]))
		}
		if got := state(t, user, f); got != "exists dirty archived, archive_id:1" {
			t.Errorf("%v truncated after its restore: state %q", f, got)
		}
	}
}

// releaseAfterRestore is the restorer of a client that sees its file
// released again right after each of its first n restores (another
// client's release, landing between a truncate's restore and its size
// change).
type releaseAfterRestore struct {
	client.HSMRestorer
	user *client.FS
	n    int
	done int
}

func (r *releaseAfterRestore) Restore(ctx context.Context, f client.FID, archiveID uint32) error {
	if err := r.HSMRestorer.Restore(ctx, f, archiveID); err != nil {
		return err
	}
	if r.done < r.n {
		r.done++
		if _, err := r.user.HSMRelease(ctx, client.Root(), f); err != nil {
			return fmt.Errorf("release after the restore: %w", err)
		}
	}
	return nil
}

// TestHSMTruncateReleasedAgain: a truncate of a released file restores
// it, and the file is released again before the truncate's size change
// reaches the MDT. The MDT refuses the size of a released file (ENODATA)
// and the client restores it once more: the file has the truncated size
// and the archive's bytes up to it, and is dirty. Before, the MDT changed
// the size of the released file alone, and the restore of the next open
// cleared the truncate's dirty mark: the file, shorter than its archive
// copy, passed for archived.
func TestHSMTruncateReleasedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const size, newSize = 5000, 100
	s := archivedFiles(t, ctx, "r", 1, size)
	user, f := s.user, s.fids[0]
	r := &releaseAfterRestore{HSMRestorer: s.hc, user: user, n: 1}
	user.SetHSMRestorer(r)
	if _, err := user.HSMRelease(ctx, client.Root(), f); err != nil {
		t.Fatal(err)
	}
	if _, err := user.Setattr(ctx, client.Root(), f, client.SetAttr{Valid: mdc.AttrSize, Size: newSize}); err != nil {
		t.Fatalf("truncate to %d: %v", newSize, err)
	}
	if r.done != 1 {
		t.Fatalf("released again after %d restores, want 1", r.done)
	}
	fh, a, err := user.Open(ctx, client.Root(), f, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	n, _ := fh.ReadAt(ctx, got, 0)
	fh.Close(ctx)
	if a.Size != newSize || !bytesEqual(got[:n], fileBytes(size)[:newSize]) {
		t.Fatalf("truncated to %d across a release: size %d, read %d bytes", newSize, a.Size, n)
	}
	// Its data differ from the archive copy's: dirty, to be archived
	// again, not taken for the copy (released, the file's truncate would
	// rest on the MDT's size alone).
	if got := state(t, user, f); got != "exists dirty archived, archive_id:1" {
		t.Errorf("truncated across a release: state %q", got)
	}
}

// TestHSMReleaseDuringRemove: a file released while the copytool removes
// its archive copy (after its check that the file is not released) keeps
// the copy, its only data: the removal is refused (EBUSY), and the file
// reads back byte for byte.
func TestHSMReleaseDuringRemove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const size = 5000
	s := archivedFiles(t, ctx, "x", 1, size)
	user, f := s.user, s.fids[0]
	ct, err := posixNew(s.c.Mount(2), s.archive)
	if err != nil {
		t.Fatal(err)
	}
	posix.SetTestHookRemoving(func(fid.FID) {
		if _, err := user.HSMRelease(ctx, client.Root(), f); err != nil {
			t.Errorf("release during the remove: %v", err)
		}
	})
	err = ct.Remove(ctx, f)
	posix.SetTestHookRemoving(nil)
	if !errorsIs(err, syscall.EBUSY) {
		t.Errorf("remove of the copy of a file released meanwhile: %v, want EBUSY", err)
	}
	if got := state(t, user, f); got != "exists released archived, archive_id:1" {
		t.Fatalf("state %q", got)
	}
	fh, _, err := user.Open(ctx, client.Root(), f, syscall.O_RDONLY)
	if err != nil {
		t.Fatalf("open after the refused remove: %v", err)
	}
	got := make([]byte, size+10)
	n, _ := fh.ReadAt(ctx, got, 0)
	fh.Close(ctx)
	want := fileBytes(size)
	if !bytesEqual(got[:n], want) {
		t.Fatalf("read back %d bytes, want %d, equal %v", n, size, bytesEqual(got[:min(n, size)], want[:min(n, size)]))
	}
}

// TestHSMRestoreImmutable: a released file that is immutable, or
// append-only, is restored through the real HSM path (the open's
// transparent restore: the copytool opens it for write, writes the
// archive's bytes into new objects, puts its times back and reports the
// restore), as Lustre's coordinator restores such files: the flags guard
// the file from its users, not its data from coming back. The user still
// may not write it, and a layout swap of it (lfs swap_layouts, lfs
// migrate) stays refused.
func TestHSMRestoreImmutable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const size = 5000
	s := archivedFiles(t, ctx, "i", 2, size)
	user, fids := s.user, s.fids
	want := fileBytes(size)
	for i, flag := range []uint32{mdd.FlagImmutable, mdd.FlagAppend} {
		f := fids[i]
		if _, err := user.HSMRelease(ctx, client.Root(), f); err != nil {
			t.Fatal(err)
		}
		before, err := user.Setattr(ctx, client.Root(), f, client.SetAttr{Valid: mdc.AttrFlags, Flags: flag})
		if err != nil {
			t.Fatalf("chattr %#x: %v", flag, err)
		}
		fh, a, err := user.Open(ctx, client.Root(), f, syscall.O_RDONLY)
		if err != nil {
			t.Fatalf("open of released file with flags %#x (restores it): %v", flag, err)
		}
		got := make([]byte, size+10)
		n, _ := fh.ReadAt(ctx, got, 0)
		fh.Close(ctx)
		if a.Size != size || !bytesEqual(got[:n], want) {
			t.Fatalf("file with flags %#x restored: size %d, read %d bytes", flag, a.Size, n)
		}
		if got := state(t, user, f); got != "exists archived, archive_id:1" {
			t.Fatalf("file with flags %#x restored: state %q", flag, got)
		}
		if a.Flags != flag || a.Mtime != before.Mtime {
			t.Fatalf("file with flags %#x restored: flags %#x, mtime %d (was %d)", flag, a.Flags, a.Mtime, before.Mtime)
		}
		if _, _, err := user.Open(ctx, client.Root(), f, syscall.O_WRONLY); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("open for write of restored file with flags %#x: %v, want EPERM", flag, err)
		}
		// (The other file has no flags while this one is swapped.)
		other := fids[1-i]
		if i == 1 {
			if _, err := user.Setattr(ctx, client.Root(), other, client.SetAttr{Valid: mdc.AttrFlags, Flags: 0}); err != nil {
				t.Fatal(err)
			}
		}
		if err := user.SwapLayouts(ctx, client.Root(), f, other, nil); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("swap_layouts of file with flags %#x: %v, want EPERM", flag, err)
		}
	}
	// The restore's ways past the flags are the copytool's alone: not for
	// a file not released, nor for a caller without CAP_SYS_ADMIN.
	f := fids[1]
	if _, err := user.Setattr(ctx, client.Root(), f, client.SetAttr{Valid: mdc.AttrMtime | mdc.AttrRestore, Mtime: 1}); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("restore setattr of a file not released: %v, want EPERM", err)
	}
	if _, err := user.HSMRelease(ctx, client.Root(), f); err != nil {
		t.Fatal(err)
	}
	noAdmin := client.Root()
	noAdmin.Cap &^= mdc.CapSysAdmin
	if _, err := user.Setattr(ctx, noAdmin, f, client.SetAttr{Valid: mdc.AttrMtime | mdc.AttrRestore, Mtime: 1}); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("restore setattr without CAP_SYS_ADMIN: %v, want EPERM", err)
	}
	if _, err := user.Setattr(ctx, client.Root(), f, client.SetAttr{Valid: mdc.AttrMode | mdc.AttrRestore, Mode: 0o777}); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("restore setattr of the mode: %v, want EPERM", err)
	}
}

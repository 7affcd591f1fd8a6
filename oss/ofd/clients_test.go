package ofd

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	_ "github.com/nacrefs/nacre/lnd/lolnd"
	_ "github.com/nacrefs/nacre/lnd/socklnd"
	"github.com/nacrefs/nacre/lnet/lnettest"
	"github.com/nacrefs/nacre/oss/osd"
	_ "github.com/nacrefs/nacre/oss/osdfile"
)

var quiet = slog.New(slog.DiscardHandler)

func openDev(t *testing.T, dir string, format bool) osd.Device {
	t.Helper()
	ctx := context.Background()
	if format {
		if err := osd.Format(ctx, "file", dir, osd.FormatOptions{Label: "nacre-OST0000"}); err != nil {
			t.Fatal(err)
		}
	}
	dev, err := osd.Open(ctx, "file", dir, osd.OpenOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// TestClientRecords: the records keep the clients connected across a
// reopen, reuse the slots of clients gone, and a damaged record makes
// the list unknown (not a wrong one) until reset.
func TestClientRecords(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "osd")
	dev := openDev(t, dir, true)
	recs, clients, err := loadClients(ctx, dev)
	if err != nil || clients != nil {
		t.Fatalf("a new OST: clients %q, %v; want not known", clients, err)
	}
	for _, u := range []string{"a", "b", "c"} {
		if err := recs.add(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if err := recs.add(ctx, "a"); err != nil { // again: nothing new
		t.Fatal(err)
	}
	if err := recs.remove(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := recs.add(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if err := recs.add(ctx, strings.Repeat("x", maxUUID+1)); err == nil {
		t.Error("a uuid over 128 bytes recorded")
	}
	if recs.slots["d"] != 1 || recs.len != 3 {
		t.Errorf("d in slot %d of %d, want b's, 1 of 3", recs.slots["d"], recs.len)
	}
	dev.Close()

	dev = openDev(t, dir, false)
	defer func() { dev.Close() }()
	recs, clients, err = loadClients(ctx, dev)
	if err != nil || !slices.Equal(clients, []string{"a", "c", "d"}) {
		t.Fatalf("after a reopen: clients %q, %v", clients, err)
	}
	if err := recs.remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := recs.add(ctx, "e"); err != nil || recs.slots["e"] != 0 {
		t.Fatalf("e in slot %d (%v), want a's, 0", recs.slots["e"], err)
	}

	// A slot not of the format: the list is not known; reset empties it.
	tx, err := dev.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := slot("f")
	bad[0] = 'X'
	if err := tx.WriteRecord(clientsFID, bad, 5*slotSize); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	recs, clients, err = loadClients(ctx, dev)
	if !errors.Is(err, osd.ErrCorrupt) || clients != nil {
		t.Fatalf("damaged records: clients %q, %v; want ErrCorrupt and not known", clients, err)
	}
	if err := recs.reset(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recs.add(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, clients, err = loadClients(ctx, dev); err != nil || !slices.Equal(clients, []string{"g"}) {
		t.Fatalf("after reset: clients %q, %v", clients, err)
	}
}

// TestDamagedClientRecordsAttr: the client records' object with damaged
// attributes (GetAttr fails with ErrCorrupt) is "damaged records": the OFD
// starts, with the records reset, instead of panicking on nil records.
func TestDamagedClientRecordsAttr(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "osd")
	dev := openDev(t, dir, true)
	recs, _, err := loadClients(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := recs.add(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	dev.Close()
	obj := filepath.Join(dir, "O", "200000001", "d0", "0")
	if _, err := os.Stat(obj); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(obj, "user.nacre.lma", []byte("garbage"), 0); err != nil {
		t.Fatalf("cannot damage the lma: %v", err)
	}
	dev = openDev(t, dir, false)
	defer dev.Close()

	port := lnettest.FreePort(t, "127.0.0.2")
	ln := lnettest.Start(t, "127.0.0.2", port)
	var o *OFD
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("ofd.New panicked on damaged client records: %v", r)
			}
		}()
		o, err = New(Config{Device: dev, Targets: ptlrpc.NewTargetSet(), Client: ptlrpc.NewClient(ln, ptlrpc.ClientConfig{Logger: quiet}), Logger: quiet})
	}()
	if err != nil {
		t.Fatalf("ofd.New with damaged client records: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	o.Close(cctx)
}

// failingSync is a device whose Sync fails while fail is set.
type failingSync struct {
	osd.Device
	fail bool
}

func (d *failingSync) Sync(ctx context.Context) error {
	if d.fail {
		return errors.New("sync failed")
	}
	return d.Device.Sync(ctx)
}

// TestClientRecordSyncFails: a connect whose record did not sync fails,
// and the client's next connect syncs it before it succeeds.
func TestClientRecordSyncFails(t *testing.T) {
	ctx := context.Background()
	dev := &failingSync{Device: openDev(t, filepath.Join(t.TempDir(), "osd"), true), fail: true}
	defer dev.Close()
	recs, _, err := loadClients(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := recs.add(ctx, "a"); err == nil {
		t.Fatal("a record not synced was taken as made")
	}
	if err := recs.add(ctx, "a"); err == nil {
		t.Fatal("the retried connect succeeded with the record still not synced")
	}
	dev.fail = false
	if err := recs.add(ctx, "a"); err != nil || recs.unsynced {
		t.Fatalf("retry with the device back: %v, unsynced %v", err, recs.unsynced)
	}
}

// TestFailedReplayBarrierReportsCommits: a replay barrier that made no
// copy (its directory exists) leaves the OST reporting commits: nothing
// would be lost in a restart, and clients would keep their pages and wait
// in their Syncs for ever.
func TestFailedReplayBarrierReportsCommits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dev := openDev(t, filepath.Join(dir, "osd"), true)
	defer dev.Close()
	tgt, err := ptlrpc.NewTargetSet().NewTarget(ptlrpc.TargetConfig{Name: "nacre-OST0000", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := loadClients(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := recs.add(ctx, "a"); err != nil { // an object for the commit below
		t.Fatal(err)
	}
	o := &OFD{cfg: Config{Name: "nacre-OST0000"}, dev: dev, tgt: tgt}
	taken := filepath.Join(dir, "barrier")
	if err := os.Mkdir(taken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := o.ReplayBarrier(ctx, taken); err == nil {
		t.Fatal("a replay barrier into an existing directory succeeded")
	}
	tx, err := dev.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx.SetTransno(dev.LastCommitted() + 1)
	if err := tx.WriteRecord(clientsFID, slot("b"), slotSize); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dev.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	o.reportCommitted()
	if got, want := tgt.LastCommitted(), dev.LastCommitted(); got != want || want == 0 {
		t.Fatalf("after a failed barrier and a commit the target reports %d committed, the device %d", got, want)
	}
}

package ofd

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/oss/osd"
)

// pausingAttr is a device whose next GetAttr, once armed, reads the
// attributes, says so on read and waits for resume before returning
// them: a handler descheduled between reading an object's size and
// setting the LVB.
type pausingAttr struct {
	osd.Device
	armed        chan struct{} // a token: the next GetAttr pauses
	read, resume chan struct{}
}

func (d *pausingAttr) GetAttr(ctx context.Context, f fid.FID) (osd.Attr, error) {
	a, err := d.Device.GetAttr(ctx, f)
	select {
	case <-d.armed:
		d.read <- struct{}{}
		<-d.resume
	default:
	}
	return a, err
}

// TestLVBUpdatesInOrder: two writes to one object whose LVB updates
// would interleave (the first reads the size, the second reads and sets
// a larger one, then the first sets its own) leave the LVB at the
// object's size, not at the first write's.
func TestLVBUpdatesInOrder(t *testing.T) {
	ctx := context.Background()
	dev := &pausingAttr{Device: openDev(t, filepath.Join(t.TempDir(), "osd"), true),
		armed: make(chan struct{}, 1), read: make(chan struct{}), resume: make(chan struct{})}
	defer dev.Close()
	lockd, err := ldlm.NewServer(ldlm.ServerConfig{Namespace: ldlm.Config{Name: "nacre-OST0000"},
		Client: ptlrpc.NewClient(nil, ptlrpc.ClientConfig{Logger: quiet}), Logger: quiet,
		LVBInit: func(ldlm.Resource) (ldlm.LVB, error) { return ldlm.LVB{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer lockd.Close()
	o := &OFD{cfg: Config{Name: "nacre-OST0000"}, dev: dev, lockd: lockd, log: quiet}
	f := fid.FID{Seq: 0x100000400, Oid: 7}
	write := func(off int64) {
		t.Helper()
		tx, err := dev.Begin(ctx)
		if err == nil {
			err = tx.WriteAt(f, [][]byte{make([]byte, 4096)}, off)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	tx, err := dev.Begin(ctx)
	if err == nil {
		err = tx.Create(f, osd.Attr{})
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	// A lock keeps the resource, and its LVB, alive.
	release, err := lockd.LockLocal(ctx, ldlm.Request{Resource: resOf(f), Mode: ldlm.PR,
		Policy: ldlm.Policy{Extent: ldlm.Whole}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	write(0)
	dev.armed <- struct{}{}
	first := make(chan error, 1)
	go func() { _, err := o.updateLVB(ctx, f); first <- err }()
	<-dev.read // the first update has read size 4096
	write(4096)
	second := make(chan error, 1)
	go func() { _, err := o.updateLVB(ctx, f); second <- err }()
	// Unserialized, the second update sets 8192 meanwhile, and the first
	// then sets 4096 over it.
	time.Sleep(50 * time.Millisecond)
	dev.resume <- struct{}{}
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	lvb, err := lockd.Glimpse(ctx, resOf(f))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := dev.GetAttr(ctx, f); lvb.Size != a.Size || a.Size != 8192 {
		t.Fatalf("LVB size %d, object size %d (want both 8192)", lvb.Size, a.Size)
	}
}

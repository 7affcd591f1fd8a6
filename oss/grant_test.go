package oss

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/tmpfs"
	"github.com/nacrefs/nacre/oss/osd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// holdBegin is a device whose Begin waits, once armed, until released:
// a write is held between taking its grant and writing its data.
type holdBegin struct {
	osd.Device
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed when a Begin waits
	release chan struct{} // closed to let it go on
}

func (d *holdBegin) arm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed, d.held, d.release = true, make(chan struct{}), make(chan struct{})
}

func (d *holdBegin) Begin(ctx context.Context) (osd.Tx, error) {
	d.mu.Lock()
	armed, held, release := d.armed, d.held, d.release
	d.armed = false
	d.mu.Unlock()
	if armed {
		close(held)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return d.Device.Begin(ctx)
}

// TestGrantOfWriteInFlight: the bytes of a write that took them from its
// client's grant are neither granted nor on the disk until the write
// lands; a grant given meanwhile (here to a client reconnecting with
// dirty data to claim) must not count them as free, or the two clients
// together hold more grant than the target has space, and writes of
// data they cached under it fail with ENOSPC.
func TestGrantOfWriteInFlight(t *testing.T) {
	dir := tmpfs.Mount(t, "32m")
	var hold *holdBegin
	e := newOSSEnvWrapped(t, func(d osd.Device) osd.Device { hold = &holdBegin{Device: d}; return hold }, 1, 3, dir)
	claimAll := func() []byte { return body(t, &ostv1.ConnectData{Grant: 1 << 40}) }
	grantOf := func(oc *ostClient) uint64 {
		var cd ostv1.ConnectData
		if err := ptlrpc.Unmarshal(oc.imps[0].Info().TargetData, &cd); err != nil {
			t.Fatal(err)
		}
		return cd.Grant
	}
	ctx := ctxT(t, 60*time.Second)
	// The objects (and LAST_ID) first, so that no bookkeeping takes
	// space after the grants are given, by a client that then goes with
	// its grant.
	c := e.client(2)
	objs := c.precreate(ctx, 0, 2)
	if _, err := c.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTStatfs}); err != nil { // the grants go by it
		t.Fatal(err)
	}
	c.close()
	if g := e.oss.OSTs()[0].Stats().Granted; g != 0 {
		t.Fatalf("%d bytes granted with no client connected", g)
	}
	a := e.clientWith(0, claimAll) // takes all the space there is as grant
	write := func(oc *ostClient, f fid.FID, off uint64, n int) (*ostv1.BRWReply, error) {
		nbs := []wire.Niobuf{{Offset: off, Len: uint32(n)}}
		req := &ptlrpc.Req{Opcode: wire.OSTWrite, Body: body(t, &ostv1.BRWRequest{Fid: ofdFID(f), Niobufs: niobufs(t, nbs), FromGrant: true}),
			Bulk: &ptlrpc.Bulk{Op: ptlrpc.BulkWrite, Buffers: [][]byte{pattern(n, off)}}}
		rep, err := oc.imps[0].Do(ctx, req)
		if err != nil {
			return nil, err
		}
		var br ostv1.BRWReply
		return &br, proto.Unmarshal(rep, &br)
	}
	ga := grantOf(a)
	const inFlight = 4 << 20
	if ga < 2*inFlight {
		t.Fatalf("client a holds %d bytes of grant, want at least %d", ga, 2*inFlight)
	}

	// a's write takes 4 MiB of its grant and is held before its data
	// lands; b connects meanwhile.
	hold.arm()
	done := make(chan error, 1)
	go func() {
		_, err := write(a, objs[0], 0, inFlight)
		done <- err
	}()
	select {
	case <-hold.held:
	case <-ctx.Done():
		t.Fatal("a's write never reached the device")
	}
	b := e.clientWith(1, claimAll)
	gb := grantOf(b)
	close(hold.release)
	if err := <-done; err != nil {
		t.Fatalf("a's write from grant: %v", err)
	}

	// Each writes what it may have cached under its grant: a what its
	// grant left when the write went out (the reply may shrink its grant
	// after; the data cached is still to be written), b its grant. The
	// OST promised the space for all of it.
	fill := func(name string, oc *ostClient, f fid.FID, off, grant uint64) {
		for grant > 0 {
			n := min(grant, 1<<20)
			_, err := write(oc, f, off, int(n))
			if errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("client %s: a write of data cached under its grant failed with ENOSPC at %d, %d bytes still to write (a cached %d, b %d; %d bytes were in flight when b connected)",
					name, off, grant, ga-inFlight, gb, inFlight)
			}
			if err != nil {
				t.Fatalf("client %s: write at %d: %v", name, off, err)
			}
			off += n
			grant -= n
		}
	}
	// Some slack for bookkeeping the OST may write meanwhile: the
	// overcommitment this is about is the 4 MiB in flight.
	const slack = 64 << 10
	fill("a", a, objs[0], inFlight, ga-inFlight-slack)
	fill("b", b, objs[1], 0, gb)
}

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

// TestGrantShrinkOnce: OST_SET_INFO KEY_GRANT_SHRINK takes bytes off the
// client's grant and the target's granted total once per shrink_seq,
// however often the request comes (a resend after a lost reply), never
// more than the client holds; a request without both fields is refused
// with EINVAL, changing nothing.
func TestGrantShrinkOnce(t *testing.T) {
	e := newOSSEnv(t, 1, 1)
	oc := e.client(0)
	ctx := ctxT(t, 30*time.Second)
	ost := e.oss.OSTs()[0]
	held := ost.Stats().Granted // the one client's
	if held < 8<<20 {
		t.Fatalf("connect grant %d", held)
	}
	shrink := func(n, seq uint64) (uint64, error) {
		rep, err := oc.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTSetInfo, Body: body(t, &ostv1.SetInfoRequest{GrantShrink: n, ShrinkSeq: seq})})
		if err != nil {
			return 0, err
		}
		var sr ostv1.SetInfoReply
		return sr.Grant, proto.Unmarshal(rep, &sr)
	}
	steps := []struct {
		n, seq, want uint64
	}{
		{4 << 20, 1, held - 4<<20},
		{4 << 20, 1, held - 4<<20}, // the same shrink again: applied already
		{1 << 20, 2, held - 5<<20},
		{1 << 40, 3, 0}, // more than it holds: all of it
		{4096, 4, 0},
	}
	for i, s := range steps {
		g, err := shrink(s.n, s.seq)
		if err != nil || g != s.want {
			t.Fatalf("step %d: shrink %d (seq %d): grant %d, %v; want %d", i, s.n, s.seq, g, err, s.want)
		}
		if st := ost.Stats(); st.Granted != s.want || st.GrantShrunk != held-s.want {
			t.Fatalf("step %d: target granted %d, %d given back; want %d, %d", i, st.Granted, st.GrantShrunk, s.want, held-s.want)
		}
	}
	for _, bad := range []*ostv1.SetInfoRequest{{}, {GrantShrink: 4096}, {ShrinkSeq: 9}} {
		_, err := oc.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTSetInfo, Body: body(t, bad)})
		if !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("set_info %v: %v, want EINVAL", bad, err)
		}
	}
	if _, err := oc.imps[0].Do(ctx, &ptlrpc.Req{Opcode: wire.OSTSetInfo, Body: []byte{0xff, 0xff}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("set_info with a body that does not decode: %v, want EINVAL", err)
	}
}

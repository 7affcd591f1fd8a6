package ofd

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/iovec"
	"github.com/nacrefs/nacre/oss/osd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// bulkBufs recycles the server's bulk buffers (Lustre's page pool): bulk
// data lands in one by LNet GET and goes to the device from it by pwritev,
// or comes from the device into one and leaves by LNet PUT — the one copy
// between the network and the disk that cannot be avoided.
var bulkBufs = sync.Pool{New: func() any { b := make([]byte, 4<<20); return &b }}

// brw is a decoded bulk request.
type brw struct {
	f    fid.FID
	req  ostv1.BRWRequest
	nbs  []wire.Niobuf
	size int
}

func (o *OFD) parseBRW(r *ptlrpc.Request) (*brw, error) {
	b := &brw{}
	if err := ptlrpc.Unmarshal(r.Body, &b.req); err != nil {
		return nil, fmt.Errorf("%w: brw body: %v", errBadRequest, err)
	}
	var err error
	if b.f, err = fidFromWire(b.req.Fid); err != nil {
		return nil, err
	}
	if b.nbs, err = wire.ParseNiobufs(b.req.Niobufs, MaxNiobufs); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	if len(b.nbs) == 0 {
		return nil, fmt.Errorf("%w: brw without niobufs", errBadRequest)
	}
	for _, nb := range b.nbs {
		b.size += int(nb.Len)
	}
	if end := b.nbs[len(b.nbs)-1].End(); end > osd.MaxObjectSize {
		return nil, fmt.Errorf("%w: %v [%d,%d) past the largest object", osd.ErrTooLarge, b.f, b.nbs[len(b.nbs)-1].Offset, end)
	}
	if b.size != int(r.Header.BulkLen) {
		return nil, fmt.Errorf("%w: niobufs of %d bytes for a bulk of %d", errBadRequest, b.size, r.Header.BulkLen)
	}
	return b, nil
}

// buffers returns a bulk buffer cut into one view per niobuf, and a
// function to give it back.
func (b *brw) buffers() ([][]byte, func()) {
	var buf []byte
	var bp *[]byte
	if b.size <= 4<<20 {
		bp = bulkBufs.Get().(*[]byte)
		buf = *bp
	} else {
		buf = make([]byte, b.size)
	}
	views := make([][]byte, len(b.nbs))
	off := 0
	for i, nb := range b.nbs {
		views[i] = buf[off : off+int(nb.Len) : off+int(nb.Len)]
		off += int(nb.Len)
	}
	return views, func() {
		if bp != nil {
			bulkBufs.Put(bp)
		}
	}
}

// write serves OST_WRITE: check the object and the space, GET the data into
// a bulk buffer, write it in one transaction numbered with the request's
// transno, and hand out grant.
func (o *OFD) write(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	b, err := o.parseBRW(r)
	if err != nil {
		return o.refuse(r, "write: %w", err)
	}
	if _, err := o.dev.GetAttr(ctx, b.f); err != nil {
		return o.refuse(r, "write %v: %w", b.f, err)
	}
	exp := r.Export()
	used, err := o.consumeGrant(ctx, exp, uint64(b.size), b.req.FromGrant)
	if err != nil {
		return o.refuse(r, "write %v of %d bytes: %w", b.f, b.size, err)
	}
	// Its bytes are in flight until spent takes them off the cached
	// statfs; a write that fails first takes them back here.
	landed := false
	defer func() {
		if !landed {
			o.notInFlight(uint64(b.size))
		}
	}()
	views, release := b.buffers()
	defer release()
	if _, err := r.BulkGet(ctx, views); err != nil {
		// Nothing was written; the grant it took goes back.
		o.returnGrant(exp, used)
		return nil, ptlrpc.Errno(err)
	}
	tx, err := o.dev.Begin(ctx)
	if err != nil {
		return nil, errno(err)
	}
	defer tx.Abort()
	for i, nb := range b.nbs {
		if err := tx.WriteAt(b.f, views[i:i+1], int64(nb.Offset)); err != nil {
			return o.refuse(r, "write %v: %w", b.f, err)
		}
	}
	if b.req.Mtime != 0 {
		if err := tx.SetAttr(b.f, osd.Attr{Mtime: fromNS(b.req.Mtime), Ctime: fromNS(b.req.Mtime), Valid: osd.AttrMtime | osd.AttrCtime}); err != nil {
			return nil, errno(err)
		}
	}
	if err := o.commit(ctx, r, tx); err != nil {
		if st := errno(err); st == -int32(syscall.ENOSPC) {
			o.gmu.Lock()
			o.gmu.noSpace++
			o.gmu.Unlock()
		}
		return o.refuse(r, "write %v: %w", b.f, err)
	}
	o.spent(uint64(b.size))
	landed = true
	o.countBulk(true, uint64(b.size))
	r.Export().CountBulk(true, uint64(b.size))
	after, err := o.updateLVB(ctx, b.f)
	if err != nil {
		return nil, errno(err)
	}
	grant := o.moreGrant(ctx, exp, b.req.GrantWant)
	o.jobs.Add(r.Header.JobID(), "write_bytes", "bytes", uint64(b.size))
	return marshal(&ostv1.BRWReply{Attr: AttrToWire(after), Grant: grant})
}

// directReader is a device that reads extents of at least DirectReadMin
// bytes around the page cache (osd-file's direct_read_min_kb).
type directReader interface{ DirectReadMin() int }

// read serves OST_READ: read every extent (holes and bytes past the end
// read as zeros) and PUT it to the client: into a bulk buffer first, or,
// for a mount on this node's LNet, straight into the client's pages
// (ptlrpc.Request.BulkPutFrom).
func (o *OFD) read(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	b, err := o.parseBRW(r)
	if err != nil {
		return o.refuse(r, "read: %w", err)
	}
	a, err := o.dev.GetAttr(ctx, b.f)
	if err != nil {
		return o.refuse(r, "read %v: %w", b.f, err)
	}
	minPiece := 0
	if d, ok := o.dev.(directReader); ok {
		// Extents the device reads around its cache go to it whole.
		minPiece = d.DirectReadMin()
	}
	// A bulk buffer only for a client elsewhere: one on this LNet gets
	// the bytes read straight into its pages.
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	buffers := func() [][]byte {
		var views [][]byte
		views, release = b.buffers()
		return views
	}
	var readErr error
	_, err = r.BulkPutFrom(ctx, b.size, minPiece, buffers, func(off int, dst [][]byte) error {
		readErr = b.readAt(ctx, o.dev, off, dst)
		return readErr
	})
	if readErr != nil {
		return o.refuse(r, "read %v: %w", b.f, readErr)
	}
	if err != nil {
		return nil, ptlrpc.Errno(err)
	}
	o.countBulk(false, uint64(b.size))
	r.Export().CountBulk(false, uint64(b.size))
	o.jobs.Add(r.Header.JobID(), "read_bytes", "bytes", uint64(b.size))
	return marshal(&ostv1.BRWReply{Attr: AttrToWire(a), Grant: o.grantOf(r.Export())})
}

// readAt reads the bulk's bytes from off on into dst: the niobufs' extents
// of the object laid end to end, zeros past the object's end.
func (b *brw) readAt(ctx context.Context, dev osd.Device, off int, dst [][]byte) error {
	n := iovec.Len(dst)
	start := 0 // of niobuf i in the bulk
	for _, nb := range b.nbs {
		end := start + int(nb.Len)
		if end <= off {
			start = end
			continue
		}
		if start >= off+n {
			break
		}
		from := max(off, start)
		part := iovec.Slice(dst, from-off, min(end, off+n)-from)
		got, err := dev.ReadAt(ctx, b.f, part, int64(nb.Offset)+int64(from-start))
		if err != nil {
			return err
		}
		if want := iovec.Len(part); got < want {
			for _, v := range iovec.Slice(part, got, want-got) {
				clear(v)
			}
		}
		start = end
	}
	return nil
}

// Grants (Lustre's tgt_grant): a client may cache dirty data up to its
// grant, because the space for it is set aside. The target never grants
// more than the space left over what is already granted; as it fills,
// grants shrink. A client that does not write gives its grant back itself
// (OST_SET_INFO, setInfo): the target shrinks grants only on a client's
// own RPCs.

// spaceLocked returns the free space not already granted, refreshing the
// statfs if it is old.
func (o *OFD) spaceLocked(ctx context.Context) uint64 {
	if time.Since(o.gmu.sfsAt) > statfsAge {
		sfs, err := o.dev.Statfs(ctx)
		if err != nil {
			o.log.Warn("ofd: statfs", "err", err)
		} else {
			o.gmu.sfs, o.gmu.sfsAt = sfs, time.Now()
		}
	}
	avail := o.gmu.sfs.BAvail * uint64(o.gmu.sfs.BSize)
	// Keep a reserve for the device's own metadata: 1/64 of the target,
	// at least 1 MiB.
	reserve := max(o.gmu.sfs.Blocks*uint64(o.gmu.sfs.BSize)/64, 1<<20)
	if avail <= reserve+o.gmu.total+o.gmu.inFlight {
		return 0
	}
	return avail - reserve - o.gmu.total - o.gmu.inFlight
}

// spent takes n written bytes off the cached statfs until the next one,
// so that grant consumed by a write is not counted as free space again
// before the file system reports it used (Lustre's tgt_grant tot_dirty),
// and off the bytes in flight, in one step: counted in neither, they
// would be free space for a grant given in between.
func (o *OFD) spent(n uint64) {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	if bs := uint64(o.gmu.sfs.BSize); bs > 0 {
		o.gmu.sfs.BAvail -= min(o.gmu.sfs.BAvail, (n+bs-1)/bs)
	}
	o.gmu.inFlight -= n
}

// notInFlight takes back the n bytes in flight of a write that failed
// before it was spent.
func (o *OFD) notInFlight(n uint64) {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	o.gmu.inFlight -= n
}

// connectGrant gives a new export its grant, returned to the client in
// the CONNECT reply: the grant the client says it holds (its dirty pages
// were cached under it, and a restarted OST has forgotten it), as far as
// the free space goes, and at least a first grant. A reconnect to the
// export it had keeps that export's grant.
func (o *OFD) connectGrant(e *ptlrpc.Export, clientData []byte) []byte {
	claimed, err := heldGrant(clientData)
	if err != nil {
		o.log.Warn("ofd: bad connect data from a client: no grant claimed", "client", e.ClientUUID(), "err", err)
	}
	o.gmu.Lock()
	g, ok := o.gmu.byExp[e]
	if !ok && !e.Gone() {
		// Not for an export dropped meanwhile (a reconnect racing an
		// eviction): its OnGone, dropGrant, has run or waits for gmu and
		// takes it back after; given after, it would never be.
		spare := o.spaceLocked(context.Background())
		g = min(o.cfg.InitialGrant, spare/8) &^ (grantUnit - 1)
		if claim := min(claimed, spare); claim > g {
			g = claim
			o.log.Info("ofd: grant held by a reconnecting client given back", "client", e.ClientUUID(),
				"claimed", claimed, "granted", g)
		}
		o.gmu.byExp[e] = g
		o.gmu.total += g
	}
	o.gmu.Unlock()
	b, _ := ptlrpc.Marshal(&ostv1.ConnectData{Grant: g})
	return b
}

// heldGrant decodes the grant a client's CONNECT says it holds: 0 for no
// data, and for data it cannot read (with the error).
func heldGrant(clientData []byte) (uint64, error) {
	if len(clientData) == 0 {
		return 0, nil
	}
	var held ostv1.ConnectData
	if err := ptlrpc.Unmarshal(clientData, &held); err != nil {
		return 0, fmt.Errorf("connect data of %d bytes: %w", len(clientData), err)
	}
	return held.Grant, nil
}

func (o *OFD) dropGrant(e *ptlrpc.Export) {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	o.gmu.total -= o.gmu.byExp[e]
	delete(o.gmu.byExp, e)
	delete(o.gmu.shrinkSeq, e)
}

// setInfo serves OST_SET_INFO, whose one key is KEY_GRANT_SHRINK (Lustre's
// tgt_grant_shrink): the client gives back some of its grant, and the
// reply says what it holds from then on.
func (o *OFD) setInfo(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var req ostv1.SetInfoRequest
	if err := ptlrpc.Unmarshal(r.Body, &req); err != nil {
		return o.refuse(r, "%w: set_info body: %v", errBadRequest, err)
	}
	if req.GrantShrink == 0 || req.ShrinkSeq == 0 {
		return o.refuse(r, "%w: set_info: grant_shrink %d, shrink_seq %d: want both", errBadRequest, req.GrantShrink, req.ShrinkSeq)
	}
	return marshal(&ostv1.SetInfoReply{Grant: o.shrinkGrant(r.Export(), req.GrantShrink, req.ShrinkSeq)})
}

// shrinkGrant takes up to n bytes off e's grant, once per seq: the client
// counts them as spent when it sends the request, as it counts a write
// from grant, and a resend must not take them twice. It returns e's grant.
func (o *OFD) shrinkGrant(e *ptlrpc.Export, n, seq uint64) uint64 {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	g, ok := o.gmu.byExp[e]
	if !ok || seq <= o.gmu.shrinkSeq[e] {
		return g
	}
	o.gmu.shrinkSeq[e] = seq
	n = min(n, g)
	g -= n
	o.gmu.byExp[e] = g
	o.gmu.total -= n
	o.gmu.shrunk += n
	return g
}

func (o *OFD) grantOf(e *ptlrpc.Export) uint64 {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	return o.gmu.byExp[e]
}

// consumeGrant accounts for a write of n bytes: from the client's grant
// if it says so (as far as the grant goes), the rest from free space,
// failing with ENOSPC if there is not enough. It returns the grant it
// took.
func (o *OFD) consumeGrant(ctx context.Context, e *ptlrpc.Export, n uint64, fromGrant bool) (uint64, error) {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	g, ok := o.gmu.byExp[e]
	use := uint64(0)
	if fromGrant && ok {
		use = min(g, n)
	}
	if rest := n - use; rest > 0 && o.spaceLocked(ctx) < rest {
		o.gmu.noSpace++
		return 0, fmt.Errorf("%w: %d bytes not covered by grant (%d held), too little space", osd.ErrNoSpace, rest, g)
	}
	if ok {
		o.gmu.byExp[e] = g - use
	}
	o.gmu.total -= use
	// From here until the data is written (spent), the write's bytes
	// are no longer granted and not yet used in the statfs: without
	// counting them, spaceLocked would give them out as grant again
	// (Lustre's tgt_grant tot_pending).
	o.gmu.inFlight += n
	return use, nil
}

// returnGrant undoes consumeGrant, which took n of e's grant, for a write
// that did not happen. (Only the grant: what the write would have taken
// from free space beyond it was never set aside.)
func (o *OFD) returnGrant(e *ptlrpc.Export, n uint64) {
	if n == 0 {
		return
	}
	o.gmu.Lock()
	defer o.gmu.Unlock()
	if g, ok := o.gmu.byExp[e]; ok {
		o.gmu.byExp[e] = g + n
		o.gmu.total += n
	}
}

// moreGrant gives e up to want more grant, as space allows, and shrinks
// its grant to its share when the target is nearly full. It returns the
// export's grant.
func (o *OFD) moreGrant(ctx context.Context, e *ptlrpc.Export, want uint64) uint64 {
	o.gmu.Lock()
	defer o.gmu.Unlock()
	g, ok := o.gmu.byExp[e]
	if !ok {
		return 0
	}
	spare := o.spaceLocked(ctx)
	if want > 0 {
		add := min(want, spare/4) &^ (grantUnit - 1)
		g += add
		o.gmu.total += add
		spare -= add
	}
	// Nearly full: no export keeps more than an equal share of what is
	// left, so the last bytes go to whoever writes them.
	if share := (spare + o.gmu.total) / uint64(len(o.gmu.byExp)+1); spare < o.gmu.total && g > share {
		shrink := (g - share) &^ (grantUnit - 1)
		g -= shrink
		o.gmu.total -= shrink
	}
	o.gmu.byExp[e] = g
	return g
}

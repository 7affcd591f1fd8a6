package ptlrpc

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/iovec"

	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// Bulk transfers (Lustre's ptlrpc_bulk_desc), server-driven: the client
// registers its buffers as MDs on its bulk portal before sending the
// request, one MD per bulkFragment bytes, with match bits XID+i for
// fragment i; the server GETs from them (a write) or PUTs into them (a
// read), every fragment at once, and only then replies. XIDs step by
// maxFragments so that the match bits of one request never meet another's.

// bulkFragment is the size of one bulk LNet message: LNet's MTU.
const bulkFragment = lwire.MTU

// maxFragments is the most fragments one bulk has: wire.MaxBulkSize /
// bulkFragment.
const maxFragments = 16

// bulkVerifyTries is how many times a server GETs bulk data whose checksum
// does not match before it gives up and answers -EBADMSG.
const bulkVerifyTries = 3

// Errors of bulk transfers on the server side. Errno maps them to the
// status a handler returns.
var (
	// ErrBulkRange: the handler asked to move more than the client
	// registered (a niobuf past the end of the bulk), or nothing.
	ErrBulkRange = errors.New("ptlrpc: bulk range outside the client's buffer")
	// ErrBulkChecksum: the data did not match its checksum after every
	// retry.
	ErrBulkChecksum = errors.New("ptlrpc: bulk checksum mismatch")
	// ErrNoBulk: the request has no bulk or its handler lacks HasBulk.
	ErrNoBulk = errors.New("ptlrpc: request has no bulk")
)

// Errno returns the status a handler should reply with for err: -EPROTO
// for ErrBulkRange and ErrNoBulk, -EBADMSG for ErrBulkChecksum, -EIO for
// anything else, 0 for nil.
func Errno(err error) int32 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrBulkRange), errors.Is(err, ErrNoBulk):
		return -errnoEPROTO
	case errors.Is(err, ErrBulkChecksum):
		return -errnoEBADMSG
	}
	return -errnoEIO
}

// checkBulk validates a handler's bulk call against the request.
func (r *Request) checkBulk(bufs [][]byte) (int, error) {
	return r.checkBulkLen(iovec.Len(bufs))
}

// checkBulkLen validates a handler's bulk call of n bytes against the
// request.
func (r *Request) checkBulkLen(n int) (int, error) {
	if r.spec == nil || r.spec.Flags&HasBulk == 0 || r.Header.BulkLen == 0 {
		return 0, fmt.Errorf("%w: %v xid %d", ErrNoBulk, r.Header.Opcode, r.Header.XID)
	}
	if n <= 0 || n > int(r.Header.BulkLen) {
		return 0, fmt.Errorf("%w: %v xid %d: %d bytes, the client registered %d",
			ErrBulkRange, r.Header.Opcode, r.Header.XID, n, r.Header.BulkLen)
	}
	return n, nil
}

// BulkGet fills dst, in order, with the first len(dst) bytes of the
// client's bulk buffer (a write), moving every fragment at once. If the
// client sent a checksum, dst must cover the whole bulk, and data that does
// not match is fetched again up to three times before ErrBulkChecksum. It
// returns only when LNet no longer touches dst.
func (r *Request) BulkGet(ctx context.Context, dst [][]byte) (int, error) {
	n, err := r.checkBulk(dst)
	if err != nil {
		return 0, err
	}
	s := r.svc
	want := r.Header.Flags&wire.MsgBulkCksum != 0
	if want && n != int(r.Header.BulkLen) {
		return 0, fmt.Errorf("%w: %v xid %d: checksummed bulk of %d bytes, only %d fetched",
			ErrBulkRange, r.Header.Opcode, r.Header.XID, r.Header.BulkLen, n)
	}
	ct := flagChecksum(r.Header.Flags)
	if want {
		s.countChecksum(ct)
	}
	for try := 1; ; try++ {
		var sums *bulkSums
		if want {
			sums = newBulkSums(ct)
		}
		if err := r.transfer(ctx, dst, n, false, sums); err != nil {
			return 0, err
		}
		if !want {
			break
		}
		if s.cfg.Faults.check(FailBulkWriteCorrupt) {
			dst[0][0] ^= 0x01
			sums = nil // summed before the damage
		}
		got := sums.verify(ct, dst, n, r.Header.BulkCksum)
		if got == r.Header.BulkCksum {
			break
		}
		s.cksumErrs.Add(1)
		s.log.Warn("ptlrpc: bulk write checksum mismatch", "from", r.Peer, "xid", r.Header.XID, "op", r.Header.Opcode,
			"type", ct, "client_cksum", fmt.Sprintf("%#08x", r.Header.BulkCksum), "server_cksum", fmt.Sprintf("%#08x", got), "try", try)
		if try == bulkVerifyTries {
			return 0, fmt.Errorf("%w: %v xid %d from %v after %d tries", ErrBulkChecksum, r.Header.Opcode, r.Header.XID, r.Peer, try)
		}
	}
	r.bulkMoved = uint32(n)
	s.bulkBytes.Add(uint64(n))
	return n, nil
}

// BulkPut sends src, in order, into the start of the client's bulk buffer
// (a read), every fragment at once, and waits until the client's LNet has
// acknowledged all of it. If the client asked for a checksum, the reply
// carries src's, by the algorithm the client named.
func (r *Request) BulkPut(ctx context.Context, src [][]byte) (int, error) {
	if r.svc.ln.IsSelf(r.Peer) {
		// Copied on this goroutine rather than the loopback's.
		return r.BulkPutFrom(ctx, iovec.Len(src), 0, func() [][]byte { return src }, func(off int, dst [][]byte) error {
			copyFrom(dst, src, off)
			return nil
		})
	}
	n, err := r.checkBulk(src)
	if err != nil {
		return 0, err
	}
	if err := r.transfer(ctx, src, n, true, nil); err != nil {
		return 0, err
	}
	r.putDone(n, func() uint32 { return flagChecksum(r.Header.Flags).Sum(src) })
	return n, nil
}

// bulkChecksum returns the algorithm of the checksum the client asked of
// this request's bulk, and whether it asked for one.
func (r *Request) bulkChecksum() (ChecksumType, bool) {
	return flagChecksum(r.Header.Flags), r.Header.Flags&wire.MsgBulkCksum != 0
}

// sumPiece is how much of a bulk BulkPutFrom has filled and summed at
// once: what a core's L2 cache holds, so the sum reads the bytes from the
// cache rather than from memory.
const sumPiece = 256 << 10

// BulkPutFrom is BulkPut of n bytes (at most what the client registered)
// that fill produces: fill(off, dst) writes the bulk's bytes from off on
// into dst, and is called in order over the whole bulk. To a client on
// this very LNet (a mount on the servers' LNet, whose messages go through
// the loopback) fill writes straight into the client's buffers, as an
// RDMA write from the server's storage would, on the handler's goroutine
// (lnet.PutLocal), and bufs is not called; to any other client fill
// writes into the n bytes of buffers bufs returns, which are then PUT.
//
// If the client asked for a checksum, each piece is summed right after
// fill wrote it, while it is in the processor's cache (Lustre's OST sums
// its pages as it reads them), and fill gets pieces of at least minPiece
// bytes (a device that reads large extents around its cache wants them
// whole) and sumPiece at most, or minPiece if larger. Without a checksum
// fill gets as much as it can at once. An error of fill ends the transfer
// and is returned as it is: the handler tells its own errors from the
// bulk's.
func (r *Request) BulkPutFrom(ctx context.Context, n, minPiece int, bufs func() [][]byte, fill func(off int, dst [][]byte) error) (int, error) {
	n, err := r.checkBulkLen(n)
	if err != nil {
		return 0, err
	}
	ct, summing := r.bulkChecksum()
	piece := 0
	if summing {
		piece = max(minPiece, sumPiece)
	}
	var sum uint32
	var fillErr error
	filled := 0
	produce := func(dst [][]byte) error {
		if err := fill(filled, dst); err != nil {
			fillErr = err
			return err
		}
		if summing {
			for _, b := range dst {
				sum = ct.Update(sum, b)
			}
		}
		filled += iovec.Len(dst)
		return nil
	}
	if r.svc.ln.IsSelf(r.Peer) {
		err = r.putLocal(ctx, n, piece, produce)
	} else {
		step := n
		if summing {
			step = piece
		}
		v := bufs()
		if iovec.Len(v) < n {
			return 0, fmt.Errorf("%w: %v xid %d: buffers of %d bytes for a bulk of %d", ErrBulkRange, r.Header.Opcode, r.Header.XID, iovec.Len(v), n)
		}
		for off := 0; off < n && err == nil; off += step {
			err = produce(iovec.Slice(v, off, min(step, n-off)))
		}
		if err == nil {
			err = r.transfer(ctx, v, n, true, nil)
		}
	}
	if fillErr != nil {
		return 0, fillErr
	}
	if err != nil {
		return 0, err
	}
	r.putDone(n, func() uint32 { return sum })
	return n, nil
}

// copyFrom fills dst with the bytes of src from off on.
func copyFrom(dst, src [][]byte, off int) {
	for _, d := range dst {
		k := len(d)
		for _, b := range iovec.Slice(src, off, k) {
			d = d[copy(d, b):]
		}
		off += k
	}
}

// putLocal is BulkPutFrom's transfer to a client on this LNet: each
// fragment PUT in place by produce, one after the other on this
// goroutine.
func (r *Request) putLocal(ctx context.Context, n, piece int, produce func(dst [][]byte) error) error {
	for i, off := 0, 0; off < n; i, off = i+1, off+bulkFragment {
		want := min(bulkFragment, n-off)
		got, err := r.svc.ln.PutLocal(ctx, r.Peer, r.bulkPortal, r.Header.XID+uint64(i), 0, want, piece, produce)
		if err == nil && got != want {
			err = fmt.Errorf("%w: fragment %d moved %d of %d bytes", ErrBulkRange, i, got, want)
		}
		if err != nil {
			return fmt.Errorf("ptlrpc: local bulk PUT of %d bytes to %v, xid %d: %w", n, r.Peer, r.Header.XID, err)
		}
	}
	return nil
}

// putDone records a bulk PUT of n bytes for the reply: the checksum, if
// the client asked for one, is sum's.
func (r *Request) putDone(n int, sum func() uint32) {
	r.bulkMoved = uint32(n)
	if r.Header.Flags&wire.MsgBulkCksum != 0 { // the client wants one
		r.svc.countChecksum(flagChecksum(r.Header.Flags))
		r.replyCksum = sum()
		r.cksumSet = true
		if r.svc.cfg.Faults.check(FailBulkReadCorrupt) {
			r.replyCksum ^= 0x01
		}
	}
	r.svc.bulkBytes.Add(uint64(n))
}

// transfer moves n bytes of bufs from or to the client's fragments, all in
// flight at once, and waits for every one to finish. A GET's data is summed
// into sums, if not nil, as it lands.
func (r *Request) transfer(ctx context.Context, bufs [][]byte, n int, put bool, sums *bulkSums) error {
	s := r.svc
	frags := (n + bulkFragment - 1) / bulkFragment
	done := make(chan error, frags)
	launched := 0
	var firstErr error
	for i := range frags {
		off := i * bulkFragment
		view := iovec.Slice(bufs, off, min(bulkFragment, n-off))
		// One value per fragment, at its ACK or REPLY: LNet raises it
		// for every operation, after the SEND, with the send's error if
		// that failed (a failed SEND counted too would end the wait below
		// a fragment early, while LNet may still write into bufs).
		md, err := s.ln.Bind(lnet.MD{Buffers: view, Threshold: 1, Observe: sums.observer(i), Handler: func(ev lnet.Event) {
			if put && ev.Type == lnet.EventAck || !put && ev.Type == lnet.EventReply {
				err := ev.Status
				if err == nil && int(ev.MLength) != iovec.Len(view) {
					err = fmt.Errorf("%w: fragment %d moved %d of %d bytes", ErrBulkRange, i, ev.MLength, iovec.Len(view))
				}
				done <- err
			}
		}})
		if err == nil {
			match := r.Header.XID + uint64(i)
			if put {
				err = s.ln.Put(ctx, md, lnet.AckReq, r.Peer, r.bulkPortal, match, 0, 0)
			} else {
				err = s.ln.Get(ctx, md, r.Peer, r.bulkPortal, match, 0)
			}
			if err != nil {
				s.ln.Unlink(md)
			}
		}
		if err != nil {
			firstErr = err
			break
		}
		launched++
	}
	// Wait for everything launched: LNet always ends an operation with an
	// event (at worst after its transaction timeout), and until then it may
	// still touch bufs.
	for range launched {
		if err := <-done; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		dir := "GET"
		if put {
			dir = "PUT"
		}
		return fmt.Errorf("ptlrpc: bulk %s of %d bytes with %v, xid %d: %w", dir, n, r.Peer, r.Header.XID, firstErr)
	}
	return nil
}

// BulkOp is the direction of a client's bulk buffer.
type BulkOp uint8

// The bulk directions.
const (
	// BulkWrite: the server GETs from the buffer (OST_WRITE).
	BulkWrite BulkOp = iota + 1
	// BulkRead: the server PUTs into the buffer (OST_READ, MDS_READPAGE).
	BulkRead
)

// Bulk is a client's bulk buffer for one request.
type Bulk struct {
	// Op says which way the data goes.
	Op BulkOp
	// Buffers are the client's memory, in niobuf order, at most the
	// import's (or wire.MaxBulkSize) bulk size in all. LNet reads or
	// writes them in place; the caller must not touch them until the call
	// returns.
	Buffers [][]byte
	// Checksum asks for checksum protection: for a write the client sends
	// the checksum and the server verifies it; for a read the server sends
	// it and the client verifies it. A mismatch is retried and counted.
	Checksum bool
	// ChecksumType is the algorithm, one the target agreed to at CONNECT
	// (Import.ChecksumTypes); zero is CRC-32C, which every target takes.
	ChecksumType ChecksumType
	// Presummed, for a checksummed write, says the caller has summed
	// Buffers already, by algorithm ChecksumType, to Presum: the request
	// sends that instead of reading the buffers again to sum them. A
	// client that sums its data as it copies it in, while it is in the
	// CPU's cache, saves a pass over memory on the path of every write.
	// The request sums the buffers itself when it goes out by another
	// algorithm (the target did not agree to ChecksumType). The server
	// verifies the checksum either way: a wrong Presum fails the request
	// with ErrBulkChecksum (-EBADMSG), which the caller can send again
	// without it.
	Presummed bool
	Presum    uint32
}

// register posts the fragments of b for xid on portal, accepting operations
// only from server. Each fragment's MD sends a value on gone when it is
// unlinked.
//
// A read's data is summed into sums, if not nil, as it lands.
func (b *Bulk) register(ln *lnet.LNet, portal uint32, server lwire.ProcessID, xid uint64, gone chan struct{}, sums *bulkSums) ([]lnet.MDHandle, error) {
	n := iovec.Len(b.Buffers)
	opts := lnet.MDManageRemote | lnet.MDOpGet
	if b.Op == BulkRead {
		opts = lnet.MDManageRemote | lnet.MDOpPut
	}
	var mds []lnet.MDHandle
	for off, i := 0, 0; off < n; off, i = off+bulkFragment, i+1 {
		h, err := ln.Attach(portal, server, xid+uint64(i), 0, lnet.InsertLast, lnet.MD{
			Buffers:   iovec.Slice(b.Buffers, off, min(bulkFragment, n-off)),
			Threshold: lnet.ThresholdInfinite,
			Options:   opts,
			Observe:   sums.observer(i),
			Handler: func(ev lnet.Event) {
				if ev.Type == lnet.EventUnlink {
					gone <- struct{}{}
				}
			},
		})
		if err != nil {
			for _, m := range mds {
				ln.Unlink(m)
			}
			for range mds {
				<-gone
			}
			return nil, fmt.Errorf("ptlrpc: post bulk fragment %d for xid %d: %w", i, xid, err)
		}
		mds = append(mds, h)
	}
	return mds, nil
}

// countChecksum counts a bulk transfer checksummed by t.
func (s *Service) countChecksum(t ChecksumType) {
	if t == ChecksumCRC32 {
		s.cksumCRC32.Add(1)
	} else {
		s.cksumCRC32C.Add(1)
	}
}

// bulkSums are the checksums of a bulk's fragments, each taken as its data
// lands (lnet.MD.Observe), while the data is still in the CPU's cache:
// summing 4 MiB afterwards would read it from memory again, which on a
// loopback or a fast network costs as much as moving it. The receiver then
// combines them into the whole bulk's checksum (ChecksumType.Combine).
type bulkSums struct {
	t ChecksumType
	// mu orders the observers, which run on LND goroutines, and verify,
	// which runs on whichever goroutine waited for the transfer (after a
	// network round trip the race detector cannot see).
	mu    sync.Mutex
	frags [maxFragments]fragSum
}

// fragSum is the checksum of a fragment's first n bytes; n is -1 after an
// operation that did not fill the fragment in order from its start.
type fragSum struct {
	crc uint32
	n   int
}

// newBulkSums returns empty sums of algorithm t (zero: CRC-32C).
func newBulkSums(t ChecksumType) *bulkSums {
	if t != ChecksumCRC32 {
		t = ChecksumCRC32C
	}
	return &bulkSums{t: t}
}

// observer returns fragment i's MD observer: an operation that starts at
// the fragment's start sums it afresh (a resent request's data lands in
// the same MDs).
func (s *bulkSums) observer(i int) func(off int, b []byte) {
	if s == nil || i >= maxFragments {
		return nil
	}
	tab := s.t.table()
	return func(off int, b []byte) {
		s.mu.Lock()
		defer s.mu.Unlock()
		f := &s.frags[i]
		if off == 0 {
			*f = fragSum{}
		}
		if f.n != off {
			f.n = -1
			return
		}
		f.crc = crc32.Update(f.crc, tab, b)
		f.n += len(b)
	}
}

// verify returns algorithm t's checksum of the first n bytes of bufs. When
// the fragments' sums, all of t and each of its whole fragment, give want,
// that is the answer; otherwise bufs are summed again from memory, so a
// mismatch is never reported on the sums alone (an operation that
// overlapped another, a short one).
func (s *bulkSums) verify(t ChecksumType, bufs [][]byte, n int, want uint32) uint32 {
	if got, ok := s.sum(t, n); ok && got == want {
		return got
	}
	return t.Sum(iovec.Slice(bufs, 0, n))
}

// sum combines the fragments' sums into the checksum of the bulk's first
// n bytes, if they are of algorithm t and cover exactly those bytes.
func (s *bulkSums) sum(t ChecksumType, n int) (uint32, bool) {
	if s == nil || t != s.t {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var c uint32
	for i := 0; n > 0; i++ {
		k := min(bulkFragment, n)
		if i >= maxFragments || s.frags[i].n != k {
			return 0, false
		}
		if i == 0 {
			c = s.frags[i].crc
		} else {
			c = t.Combine(c, s.frags[i].crc, k)
		}
		n -= k
	}
	return c, true
}

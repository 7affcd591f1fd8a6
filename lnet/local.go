package lnet

import (
	"context"
	"fmt"

	"github.com/nacrefs/nacre/internal/iovec"
	"github.com/nacrefs/nacre/lnet/wire"
)

// localPiece is how much PutLocal has fill write at once when the target
// MD has an observer and the caller set no piece: the observer then reads
// each piece while it is in the processor's cache.
const localPiece = 256 << 10

// IsSelf reports whether p is this LNet's own process: 0@lo or one of its
// NIDs, with its PID. Messages to it go through the loopback (0@lo).
func (ln *LNet) IsSelf(p wire.ProcessID) bool {
	return p.PID == ln.pid && (p.NID == wire.LoNID || ln.isLocal(p.NID))
}

// PutLocal is a PUT without an ACK to this LNet's own process (IsSelf:
// a client sharing a server's LNet) whose payload is written in place: LNet matches the
// target MD as it would for any PUT, on the caller's goroutine, and has
// fill write the bytes straight into it. Where a PUT through lolnd copies
// a source MD into the target MD on the loopback's one delivery
// goroutine, fill can produce the bytes where they go: an OST reads a
// file straight into the pages of a mount on its node, the one copy an
// RDMA write from the server's storage would make, and reads of
// different handlers run at once.
//
// fill is called in order with consecutive pieces of the first mlen
// bytes of the payload (mlen is what the MD takes: length, or less with
// MDTruncate), each at most piece bytes if piece > 0, else as much as
// the MD takes, or localPiece if the MD has an observer. The target MD
// gets its PUT event as usual (with fill's error as its status); PutLocal
// returns mlen, fill's error, or one wrapping ErrDropped if nothing
// matched. Only PutLocal's caller knows the outcome: there is no ACK, and
// no SEND event.
func (ln *LNet) PutLocal(ctx context.Context, target wire.ProcessID, portal uint32, match uint64, offset uint32, length, piece int, fill func(dst [][]byte) error) (int, error) {
	switch {
	case !ln.IsSelf(target):
		return 0, fmt.Errorf("%w: %v", ErrNotLoopback, target)
	case length < 0:
		return 0, fmt.Errorf("%w: local PUT of %d bytes", ErrInvalid, length)
	case length > wire.MTU:
		return 0, fmt.Errorf("%w: local PUT of %d bytes", ErrMsgSize, length)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	hdr := wire.Header{
		// From the NID it goes to, as any operation to a local NID.
		Type: wire.MsgPut, SrcNID: target.NID, DstNID: target.NID, SrcPID: ln.pid, DstPID: target.PID,
		PayloadLen: uint32(length), WMD: wire.WireHandleNone, MatchBits: match, Portal: portal, Offset: offset,
	}
	rx := &fillRx{fill: fill, piece: piece}
	if err := ln.parse(ln.lo, &hdr, wire.LoNID, rx); err != nil {
		return 0, err
	}
	return rx.mlen, rx.err
}

// fillRx is the Rx of a PutLocal: the payload comes from fill.
type fillRx struct {
	fill  func(dst [][]byte) error
	piece int
	mlen  int
	err   error
}

var _ ObservingRx = (*fillRx)(nil)

func (r *fillRx) Recv(dst [][]byte, mlen int) error { return r.RecvObserved(dst, mlen, nil) }

// RecvObserved has fill write the first mlen bytes into dst piece by
// piece, showing each piece to seen right after; the bytes past mlen are
// never produced.
func (r *fillRx) RecvObserved(dst [][]byte, mlen int, seen func([]byte)) error {
	step := r.piece
	if step <= 0 {
		step = mlen
		if seen != nil {
			step = localPiece
		}
	}
	for off := 0; off < mlen; off += step {
		p := iovec.Slice(dst, off, min(step, mlen-off))
		if err := r.fill(p); err != nil {
			r.err = err
			return err
		}
		if seen != nil {
			for _, b := range p {
				seen(b)
			}
		}
	}
	r.mlen = mlen
	return nil
}

package osc

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// maxNiobufs bounds the niobufs of one RPC: the OST refuses more
// (oss/ofd MaxNiobufs).
const maxNiobufs = 256

// MaxObjectSize is the largest object an OST keeps (oss/osd
// MaxObjectSize, ext4's limit for 4 KiB blocks): writes past it fail with
// EFBIG before they reach the cache.
const MaxObjectSize = 1<<44 - 1<<12

// seg is a byte range of one page that an RPC moves.
type seg struct {
	p *page
	s span
}

// brwRPC is one bulk RPC of one object (Lustre's osc_brw_async_args):
// the pages' byte ranges in object order, the niobufs that describe them
// (contiguous ranges merged) and the bulk buffers that are the pages
// themselves (ranges adjacent in memory merged).
type brwRPC struct {
	obj   *Object
	write bool
	segs  []seg
	nbs   []wire.Niobuf
	bufs  [][]byte
	bytes int
	// charged pages (and grant) the RPC carries; fromGrant marks the
	// write OBD_BRW_FROM_GRANT; want is the grant asked for.
	charged   int
	fromGrant bool
	want      uint64
	ticket    grantTicket
	mtime     int64
	// sync marks a write sent in the writer's context without grant;
	// pulled counts the pages of earlier writes it carries.
	sync   bool
	pulled int
	// job is the job id the RPC is for.
	job string
	// transno is a write's, from its reply; stable says the OST had
	// already committed it when the reply came.
	transno uint64
	stable  bool
	// sum is a write's checksum of the ranges added so far, joined from
	// their pages' sums (joinSum); sumOK says every range had one, all by
	// sumType.
	sum     uint32
	sumType ptlrpc.ChecksumType
	sumOK   bool
}

// crc32Pages and crc32cPages join the sums of whole pages.
var crc32Pages, crc32cPages = ptlrpc.ChecksumCRC32.Shifter(PageSize), ptlrpc.ChecksumCRC32C.Shifter(PageSize)

// pageShifter returns the Shifter joining whole pages summed by t, nil for
// an algorithm without one.
func pageShifter(t ptlrpc.ChecksumType) *ptlrpc.Shifter {
	switch t {
	case ptlrpc.ChecksumCRC32C:
		return &crc32cPages
	case ptlrpc.ChecksumCRC32:
		return &crc32Pages
	}
	return nil
}

// joinSum extends r's checksum over range s of p, about to be added, with
// the page's sum, if it has one of exactly s.
func (r *brwRPC) joinSum(p *page, s span) {
	switch {
	case p.sumOf != s || s.empty():
		r.sumOK = false
	case len(r.segs) == 0:
		r.sum, r.sumType, r.sumOK = p.sum, p.sumType, true
	case !r.sumOK || p.sumType != r.sumType:
		r.sumOK = false
	default:
		n := s.to - s.from
		if sh := pageShifter(r.sumType); sh != nil && n == sh.Len() {
			r.sum = sh.Combine(r.sum, p.sum)
		} else { // a part of a page, at either end of the RPC
			r.sum = r.sumType.Combine(r.sum, p.sum, n)
		}
	}
}

// add appends a range of p, which comes after every range already added.
// It returns false, adding nothing, if the range would need a niobuf more
// than the RPC may carry.
func (r *brwRPC) add(p *page, s span) bool {
	off := p.off(s.from)
	n := s.to - s.from
	if k := len(r.nbs) - 1; k >= 0 && r.nbs[k].End() == off {
		r.nbs[k].Len += uint32(n)
	} else {
		if len(r.nbs) == maxNiobufs {
			return false
		}
		r.nbs = append(r.nbs, wire.Niobuf{Offset: off, Len: uint32(n)})
	}
	if r.write {
		r.joinSum(p, s)
	}
	b := p.data[s.from:s.to]
	if k := len(r.bufs) - 1; k >= 0 && adjacent(r.bufs[k], b) {
		r.bufs[k] = r.bufs[k][:len(r.bufs[k])+n]
	} else {
		r.bufs = append(r.bufs, b)
	}
	r.segs = append(r.segs, seg{p, s})
	r.bytes += n
	return true
}

// pages returns the pages r moves (a page with two ranges counts once).
func (r *brwRPC) pages() int {
	n := 0
	for i, s := range r.segs {
		if i == 0 || r.segs[i-1].p != s.p {
			n++
		}
	}
	return n
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// adjacent reports whether b starts in memory right where a ends, within
// a's capacity (pages of one slab), so that a can be extended over b.
func adjacent(a, b []byte) bool {
	if len(b) == 0 || cap(a)-len(a) < len(b) {
		return false
	}
	return &a[:len(a)+1][len(a)] == &b[0]
}

// isNoSpace reports whether err is the OST saying it is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// fidToWire converts a FID for an OST request.
func fidToWire(f fid.FID) *ostv1.FID { return &ostv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver} }

// brwReq is r as an OST_WRITE or OST_READ request, its pages the bulk
// buffer.
func (c *Client) brwReq(r *brwRPC) (*ptlrpc.Req, error) {
	nbs, err := wire.AppendNiobufs(nil, r.nbs)
	if err != nil {
		return nil, fmt.Errorf("osc: ost%04x: %v: %w", c.index, r.obj.fid, err)
	}
	body, err := ptlrpc.Marshal(&ostv1.BRWRequest{Fid: fidToWire(r.obj.fid), Niobufs: nbs, FromGrant: r.fromGrant, GrantWant: r.want, Mtime: r.mtime})
	if err != nil {
		return nil, err
	}
	op, bop := wire.OSTRead, ptlrpc.BulkRead
	if r.write {
		op, bop = wire.OSTWrite, ptlrpc.BulkWrite
	}
	bulk := &ptlrpc.Bulk{Op: bop, Buffers: r.bufs}
	if c.tun.checksums.Load() {
		bulk.Checksum, bulk.ChecksumType = true, c.ChecksumType()
		if r.write && r.sumOK && r.sumType == bulk.ChecksumType {
			bulk.Presummed, bulk.Presum = true, r.sum
		}
	}
	return &ptlrpc.Req{Opcode: op, Body: body, JobID: r.job, Bulk: bulk}, nil
}

// brw sends r as OST_WRITE or OST_READ with its pages as the bulk buffer
// and returns the reply.
func (c *Client) brw(ctx context.Context, r *brwRPC) (*ostv1.BRWReply, error) {
	preq, err := c.brwReq(r)
	if err != nil {
		return nil, err
	}
	defer c.st.rpcs[b2i(r.write)].start(r.pages())()
	repBody, err := c.imp.Do(ctx, preq)
	if b := preq.Bulk; b.Presummed {
		c.st.presummed.Add(1)
		if errors.Is(err, syscall.EBADMSG) {
			// The OST did not take the checksum joined from the pages'
			// sums (and wrote nothing): a page's bytes changed without its
			// sum. Send the pages again, summed afresh, rather than fail
			// a write whose data is right.
			c.st.presumMisses.Add(1)
			c.log.Error("osc: the OST refused the write checksum joined from the pages' sums; sending it again summed from the data",
				"ost", c.index, "fid", r.obj.fid, "pages", r.pages(), "err", err)
			if preq, err = c.brwReq(r); err != nil {
				return nil, err
			}
			preq.Bulk.Presummed = false
			repBody, err = c.imp.Do(ctx, preq)
		}
	}
	r.transno = preq.Transno
	r.stable = r.transno == 0 || r.transno <= c.imp.Info().LastCommitted
	if err != nil {
		what := "read"
		if r.write {
			what = "write"
			c.st.writeErrors.Add(1)
		}
		first, last := r.nbs[0].Offset, r.nbs[len(r.nbs)-1].End()
		return nil, fmt.Errorf("osc: ost%04x: %s %v [%d,%d): %w", c.index, what, r.obj.fid, first, last, err)
	}
	var rep ostv1.BRWReply
	if err := ptlrpc.Unmarshal(repBody, &rep); err != nil {
		return nil, fmt.Errorf("osc: ost%04x: %v: bad reply: %w", c.index, r.obj.fid, err)
	}
	if r.write {
		c.st.writeRPCs.Add(1)
		c.st.writeBytes.Add(uint64(r.bytes))
		c.st.writeSize.add(uint64(r.bytes))
	} else {
		c.st.readRPCs.Add(1)
		c.st.readBytes.Add(uint64(r.bytes))
		c.st.readSize.add(uint64(r.bytes))
	}
	return &rep, nil
}

// punch sends OST_PUNCH for [start, end) of f (end = ^0: truncate at start)
// and returns the object's attributes after it and the punch's transno.
func (c *Client) punch(ctx context.Context, f fid.FID, start, end uint64) (*ostv1.Attr, uint64, error) {
	now := time.Now().UnixNano()
	return c.objectRPC(ctx, wire.OSTPunch, &ostv1.PunchRequest{Fid: fidToWire(f), Start: start, End: end, Mtime: now, Ctime: now},
		fmt.Sprintf("punch %v [%d,%d)", f, start, end))
}

// objectRPC sends a request of opcode op with body m that changes an
// object and returns the object's attributes the reply (an ObjectReply)
// gives, and the request's transno; what names the request in errors.
func (c *Client) objectRPC(ctx context.Context, op wire.Opcode, m proto.Message, what string) (*ostv1.Attr, uint64, error) {
	body, err := ptlrpc.Marshal(m)
	if err != nil {
		return nil, 0, err
	}
	req := &ptlrpc.Req{Opcode: op, Body: body}
	rep, err := c.imp.Do(ctx, req)
	if err != nil {
		return nil, 0, fmt.Errorf("osc: ost%04x: %s: %w", c.index, what, err)
	}
	var or ostv1.ObjectReply
	if err := ptlrpc.Unmarshal(rep, &or); err != nil {
		return nil, 0, fmt.Errorf("osc: ost%04x: %s: bad reply: %w", c.index, what, err)
	}
	return or.Attr, req.Transno, nil
}

// getattr returns f's attributes as the OST has them.
func (c *Client) getattr(ctx context.Context, f fid.FID) (*ostv1.Attr, error) {
	body, err := ptlrpc.Marshal(&ostv1.ObjectRequest{Fid: fidToWire(f)})
	if err != nil {
		return nil, err
	}
	rep, err := c.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTGetattr, Body: body})
	if err != nil {
		return nil, fmt.Errorf("osc: ost%04x: getattr %v: %w", c.index, f, err)
	}
	var or ostv1.ObjectReply
	if err := ptlrpc.Unmarshal(rep, &or); err != nil {
		return nil, fmt.Errorf("osc: ost%04x: getattr %v: bad reply: %w", c.index, f, err)
	}
	return or.Attr, nil
}

// setTimes sends OST_SETATTR of f's mtime and ctime.
func (c *Client) setTimes(ctx context.Context, f fid.FID, mtime, ctime int64) error {
	body, err := ptlrpc.Marshal(&ostv1.ObjectRequest{Fid: fidToWire(f),
		Attr: &ostv1.Attr{Mtime: mtime, Ctime: ctime, Valid: uint32(ostv1.AttrValid_ATTR_VALID_MTIME | ostv1.AttrValid_ATTR_VALID_CTIME)}})
	if err != nil {
		return err
	}
	if _, err := c.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTSetattr, Body: body}); err != nil {
		return fmt.Errorf("osc: ost%04x: setattr %v: %w", c.index, f, err)
	}
	return nil
}

// syncOST sends OST_SYNC for f and waits until the OST reports committed
// every change the import keeps for replay, so that whatever the client
// wrote before is durable.
func (c *Client) syncOST(ctx context.Context, f fid.FID) error {
	last := func() uint64 {
		if u := c.imp.Uncommitted(); len(u) > 0 {
			return u[len(u)-1]
		}
		return 0
	}
	inst, upTo := c.imp.Info().Instance, last()
	// committed reports whether the OST has committed upTo. An OST that
	// restarted meanwhile numbers anew what it lost, as its clients
	// replay and rewrite it, maybe in fewer transnos than before (the
	// pages of many writes in one rewrite): upTo, a number of the previous
	// life, might never come, and is then what the replay list holds once
	// recovery is over.
	committed := func() bool {
		info := c.imp.Info()
		if info.Instance != inst && info.State == ptlrpc.StateFull {
			inst, upTo = info.Instance, last()
		}
		return info.LastCommitted >= upTo
	}
	body, err := ptlrpc.Marshal(&ostv1.SyncRequest{Fid: fidToWire(f)})
	if err != nil {
		return err
	}
	if _, err := c.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTSync, Body: body}); err != nil {
		return fmt.Errorf("osc: ost%04x: sync %v: %w", c.index, f, err)
	}
	for wait := time.Millisecond; !committed(); wait = min(2*wait, 100*time.Millisecond) {
		// The OST commits in the background and tells on every reply.
		if err := c.imp.Ping(ctx); err != nil {
			return fmt.Errorf("osc: ost%04x: sync %v: %w", c.index, f, err)
		}
		if committed() {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return nil
}

// Statfs returns the OST's space and object counts (OST_STATFS).
func (c *Client) Statfs(ctx context.Context) (*ostv1.StatfsReply, error) {
	rep, err := c.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.OSTStatfs})
	if err != nil {
		return nil, fmt.Errorf("osc: ost%04x: statfs: %w", c.index, err)
	}
	var sr ostv1.StatfsReply
	if err := ptlrpc.Unmarshal(rep, &sr); err != nil {
		return nil, fmt.Errorf("osc: ost%04x: statfs: bad reply: %w", c.index, err)
	}
	return &sr, nil
}

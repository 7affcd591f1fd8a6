package socklnd

// The receive path (the rx half of Lustre's socklnd_cb.c): a connection's
// reader takes each fixed header out of the connection's read buffer, hands
// it to LNet with Host.Parse, and waits until LNet has had the payload moved
// with Rx.Recv before it reads on.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/internal/iovec"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// rx is one received message whose payload is still in the socket (or the
// connection's read buffer): socklnd's lnet.Rx. It carries its decoded
// header, so the header LNet was handed stays valid for as long as LNet
// keeps the rx.
type rx struct {
	hdr  wire.Header
	c    *conn
	used atomic.Bool // Recv has been called
	// later is what the message's handler left to run on the reader
	// goroutine (lnet.Continuer); only the reader touches it, during
	// Host.Parse and after.
	later   lnet.Continuation
	parsing bool // in Host.Parse: Continue may be called
	// replaced is set, under the watchdog's mu, when the connection's
	// reading is handed to a new reader while this message's continuation
	// runs (release, or the watchdog): the goroutine running it then ends
	// when it returns. returned is set when the continuation has returned.
	replaced, returned bool
}

// readLoop reads messages off c until one of them leaves a continuation
// (cont.go): it returns that message, with more set if c is still to be
// read. It stops, dropping the connection, on a read error, a bad header
// (a peer that lost framing or speaks something else: logged with the peer
// and the reason) or a failed Recv; and when c is closed by anyone else.
func (c *conn) readLoop() (cont *rx, more bool) {
	ni, from := c.ni, c.p.nid
	for {
		b, err := c.rb.next(headerReader{c}, wire.HeaderSize)
		if c.hdrDeadline {
			c.hdrDeadline = false
			c.nc.SetReadDeadline(time.Time{})
		}
		if err != nil {
			if errors.Is(err, io.EOF) { // nothing of a header read: a clean close
				ni.dropConn(c, slog.LevelInfo, "closed by peer", err)
			} else {
				c.readFailed("reading header", err)
			}
			return nil, false
		}
		r := &rx{c: c}
		if err := r.hdr.Unmarshal(b); err != nil {
			ni.stats.badHeaders.Add(1)
			ni.dropConn(c, slog.LevelWarn, "bad header", err)
			return nil, false
		}
		r.parsing = true
		err = ni.host.Parse(&r.hdr, from, r)
		r.parsing = false
		if err != nil {
			ni.stats.rxRefused.Add(1)
			ni.log.Debug("socklnd: message refused by LNet", "peer", from.String(), "msg", r.hdr.Type.String(),
				"src", r.hdr.Src().String(), "dst", r.hdr.Dst().String(), "err", err)
			// The contract has LNet drain a refused message itself; make
			// sure the stream moves on if it did not.
			if r.used.CompareAndSwap(false, true) {
				r.recv(nil, 0, nil)
			}
		}
		select {
		case err := <-c.rxDone:
			if err != nil {
				c.readFailed("reading payload", err)
				return r.continued(), false
			}
		case <-c.closing:
			return r.continued(), false
		}
		if r.later != nil {
			return r, true
		}
	}
}

// headerReader is what a connection's reader reads headers through. While
// no byte of a header is in it waits without a deadline (an idle peer is
// kept; TCP keepalive finds a dead one), but once part of one has come the
// rest must follow within Config.Timeout, as a payload's must: a peer that
// stops in the middle of a header is dropped rather than holding the
// connection and its reader for as long as its kernel answers keepalives.
// It is a value holding only c, so passing it as an io.Reader allocates
// nothing.
type headerReader struct{ c *conn }

func (h headerReader) Read(b []byte) (int, error) {
	c := h.c
	if !c.hdrDeadline && c.rb.buffered() > 0 {
		c.hdrDeadline = true
		c.nc.SetReadDeadline(time.Now().Add(c.ni.conf.Timeout))
	}
	return c.nc.Read(b)
}

// readFailed drops c after a read error, saying why in a person's terms.
func (c *conn) readFailed(what string, err error) {
	why := what
	switch {
	case errors.Is(err, net.ErrClosed):
		c.ni.dropConn(c, slog.LevelDebug, "closed locally", err) // normally a no-op: closed by shut
		return
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		why = "peer closed the connection while " + what
	case errors.Is(err, os.ErrDeadlineExceeded):
		why = fmt.Sprintf("no progress for %v while %s", c.ni.conf.Timeout, what)
	}
	c.ni.dropConn(c, slog.LevelWarn, why, err)
}

// Recv moves the payload: the first mlen bytes into dst in order, the rest
// read and dropped. Payload bytes that came in the same read as the header
// (on a control connection: see rxBuf) are copied from the read buffer;
// the rest are read from the socket straight into dst (no staging buffer).
// It may be called from any goroutine, once; the connection's reader waits
// for it. It returns nil when the bytes are in place; an error wrapping
// lnet.ErrConnReset when the connection failed (it is then dropped); or,
// for a call that breaks the contract (a second call, mlen beyond the
// payload or beyond dst), an error saying so, after draining the whole
// payload so the connection stays usable.
func (r *rx) Recv(dst [][]byte, mlen int) error {
	if !r.used.CompareAndSwap(false, true) {
		return fmt.Errorf("socklnd: Recv called twice for one %v from %v", r.hdr.Type, r.c.p.nid)
	}
	return r.recv(dst, mlen, nil)
}

// RecvObserved is Recv that shows seen each piece of the payload as it is
// read, in reads of at most observedRead bytes so that the piece is still
// in the CPU's cache (lnet.ObservingRx).
func (r *rx) RecvObserved(dst [][]byte, mlen int, seen func([]byte)) error {
	if !r.used.CompareAndSwap(false, true) {
		return fmt.Errorf("socklnd: Recv called twice for one %v from %v", r.hdr.Type, r.c.p.nid)
	}
	return r.recv(dst, mlen, seen)
}

// observedRead is the most an observed receive reads at once: a piece the
// kernel just copied is in a core's L2 cache (512 KiB and more on the CPUs
// servers have) when the observer reads it.
const observedRead = 128 << 10

func (r *rx) recv(dst [][]byte, mlen int, seen func([]byte)) error {
	c := r.c
	n := int(r.hdr.PayloadLen)
	var misuse error
	if space := iovec.Len(dst); mlen < 0 || mlen > n || mlen > space {
		misuse = fmt.Errorf("socklnd: Recv of %d bytes into %d from a %d-byte payload: draining it all", mlen, space, n)
		mlen = 0
	}
	// The deadline bounds the socket reads only: a payload already in the
	// buffer costs no system call at all.
	deadline := n > c.rb.buffered()
	if deadline {
		c.nc.SetReadDeadline(time.Now().Add(c.ni.conf.Timeout))
	}
	err := c.rb.payload(c.nc, dst, mlen, n, seen)
	if deadline && err == nil {
		c.nc.SetReadDeadline(time.Time{})
	}
	if err == nil {
		c.ni.stats.rxMsgs.Add(1)
		c.ni.stats.rxBytes.Add(uint64(wire.HeaderSize + n))
	}
	c.rxDone <- err
	if err != nil {
		return fmt.Errorf("socklnd: receive %v from %v: %w: %w", r.hdr.Type, c.p.nid, lnet.ErrConnReset, err)
	}
	return misuse
}

// rxBufSize is the read buffer of a control (or untyped) connection: one
// read takes in whatever the socket holds up to that, which for small
// messages is several headers and their payloads at once.
const rxBufSize = 4 << 10

// rxBuf is a connection's read buffer. The reader reads into it whatever
// the socket has, up to its size, and takes headers out of it; Recv copies
// out the payload bytes that came along and reads the rest of a payload
// from the socket straight into the MD.
//
// So at most rxBufSize-HeaderSize bytes of any payload are ever copied,
// and only on the connections that carry small messages: what is copied
// is the start of a payload that arrived in the same read as its header,
// which is the price of reading a small message in one system call
// instead of two (the kernel copies all of it either way). A bulk-in
// connection's buffer holds exactly one header, so its payloads, the
// bulk data, always go from the socket straight into the MD.
type rxBuf struct {
	b    []byte
	r, w int // b[r:w] has been read from the socket and not consumed
}

func (rb *rxBuf) init(t wire.ConnType) {
	size := rxBufSize
	if t == wire.ConnBulkIn {
		size = wire.HeaderSize
	}
	rb.b = make([]byte, size)
}

// buffered is how many bytes were read and not consumed yet.
func (rb *rxBuf) buffered() int { return rb.w - rb.r }

// next consumes and returns the next n bytes (n at most the buffer size),
// reading from src once or more if fewer are buffered. The bytes are valid
// until the next call. It fails with io.EOF if src ends before any of them
// came, io.ErrUnexpectedEOF if it ends after some, or src's error.
func (rb *rxBuf) next(src io.Reader, n int) ([]byte, error) {
	if rb.r == rb.w {
		rb.r, rb.w = 0, 0
	}
	if rb.w-rb.r < n {
		if len(rb.b)-rb.r < n {
			rb.w = copy(rb.b, rb.b[rb.r:rb.w])
			rb.r = 0
		}
		for empty := 0; rb.w-rb.r < n; {
			k, err := src.Read(rb.b[rb.w:])
			rb.w += k
			if rb.w-rb.r >= n {
				break // an error comes back on the next read
			}
			switch {
			case errors.Is(err, io.EOF) && rb.w > rb.r:
				return nil, io.ErrUnexpectedEOF
			case err != nil:
				return nil, err
			case k == 0:
				if empty++; empty == 100 {
					return nil, io.ErrNoProgress
				}
			}
		}
	}
	b := rb.b[rb.r : rb.r+n]
	rb.r += n
	return b, nil
}

// payload moves the next n bytes of the stream: the first mlen into dst
// (which has room for them), in order, and the rest are dropped. Buffered
// bytes are copied; the others are read from src straight into dst. If
// seen is not nil it is shown each piece of dst once it is filled.
func (rb *rxBuf) payload(src io.Reader, dst [][]byte, mlen, n int, seen func([]byte)) error {
	k := min(rb.buffered(), n)
	in := rb.b[rb.r : rb.r+k]
	rb.r += k
	cur := cursor{v: dst, seen: seen}
	cur.copyFrom(in[:min(k, mlen)])
	if want := mlen - k; want > 0 {
		if err := cur.readFrom(src, want); err != nil {
			return unexpected(err)
		}
	}
	if drop := n - max(k, mlen); drop > 0 {
		if _, err := io.CopyN(io.Discard, src, int64(drop)); err != nil { // io.Discard reads in pooled 8 KiB chunks
			return unexpected(err)
		}
	}
	return nil
}

// unexpected turns an EOF in the middle of a payload, which the header
// promised, into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// cursor is a position in a list of views, for filling them in order.
type cursor struct {
	v    [][]byte
	off  int          // into v[0]
	seen func([]byte) // if not nil, shown each piece once it is filled
}

// copyFrom copies b to the cursor, which has room for it, and moves on.
func (c *cursor) copyFrom(b []byte) {
	for len(b) > 0 {
		k := copy(c.v[0][c.off:], b)
		c.filled(k)
		b = b[k:]
	}
}

// readFrom reads exactly n bytes from r to the cursor, which has room for
// them, and moves on. Observed, it reads at most observedRead bytes at a
// time and shows each read's bytes as soon as they are in; otherwise it
// fills each view with as few reads as the socket allows.
func (c *cursor) readFrom(r io.Reader, n int) error {
	for n > 0 {
		k := min(len(c.v[0])-c.off, n)
		if k == 0 { // an empty view: a Read into it would read nothing
			c.advance(0)
			continue
		}
		if c.seen == nil {
			if _, err := io.ReadFull(r, c.v[0][c.off:c.off+k]); err != nil {
				return err
			}
		} else {
			var err error
			if k, err = r.Read(c.v[0][c.off : c.off+min(k, observedRead)]); k == 0 {
				if err == nil {
					err = io.ErrNoProgress
				}
				return err
			}
		}
		n -= k
		c.filled(k)
	}
	return nil
}

// filled moves the cursor on past the k bytes just put at it, showing
// them to seen first.
func (c *cursor) filled(k int) {
	if c.seen != nil && k > 0 {
		c.seen(c.v[0][c.off : c.off+k])
	}
	c.advance(k)
}

func (c *cursor) advance(k int) {
	c.off += k
	for len(c.v) > 0 && c.off == len(c.v[0]) {
		c.v, c.off = c.v[1:], 0
	}
}

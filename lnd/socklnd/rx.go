package socklnd

// The receive path (the rx half of Lustre's socklnd_cb.c): a connection's
// reader reads each fixed header into the connection's buffer, hands it to
// LNet with Host.Parse, and waits until LNet has had the payload moved with
// Rx.Recv before it reads the next header.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// rx is one received message whose payload is still in the socket: socklnd's
// lnet.Rx. It carries its decoded header, so the header LNet was handed
// stays valid for as long as LNet keeps the rx.
type rx struct {
	hdr  wire.Header
	c    *conn
	used atomic.Bool // Recv has been called
}

// readLoop is c's reader. It stops, dropping the connection, on a read
// error, a bad header (a peer that lost framing or speaks something else:
// logged with the peer and the reason) or a failed Recv; and when c is
// closed by anyone else.
func (c *conn) readLoop() {
	ni, from := c.ni, c.p.nid
	for {
		if n, err := io.ReadFull(c.nc, c.rxHdr[:]); err != nil {
			if n == 0 && errors.Is(err, io.EOF) {
				ni.dropConn(c, slog.LevelInfo, "closed by peer", err)
			} else {
				c.readFailed("reading header", err)
			}
			return
		}
		r := &rx{c: c}
		if err := r.hdr.Unmarshal(c.rxHdr[:]); err != nil {
			ni.stats.badHeaders.Add(1)
			ni.dropConn(c, slog.LevelWarn, "bad header", err)
			return
		}
		if err := ni.host.Parse(&r.hdr, from, r); err != nil {
			ni.stats.rxRefused.Add(1)
			ni.log.Debug("socklnd: message refused by LNet", "peer", from.String(), "msg", r.hdr.Type.String(),
				"src", r.hdr.Src().String(), "dst", r.hdr.Dst().String(), "err", err)
			// The contract has LNet drain a refused message itself; make
			// sure the stream moves on if it did not.
			if r.used.CompareAndSwap(false, true) {
				r.recv(nil, 0)
			}
		}
		select {
		case err := <-c.rxDone:
			if err != nil {
				c.readFailed("reading payload", err)
				return
			}
		case <-c.closing:
			return
		}
	}
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
// read and dropped, reading straight from the socket into dst (no staging
// buffer). It may be called from any goroutine, once; the connection's
// reader waits for it. It returns nil when the bytes are in place; an error
// wrapping lnet.ErrConnReset when the connection failed (it is then
// dropped); or, for a call that breaks the contract (a second call, mlen
// beyond the payload or beyond dst), an error saying so, after draining the
// whole payload so the connection stays usable.
func (r *rx) Recv(dst [][]byte, mlen int) error {
	if !r.used.CompareAndSwap(false, true) {
		return fmt.Errorf("socklnd: Recv called twice for one %v from %v", r.hdr.Type, r.c.p.nid)
	}
	return r.recv(dst, mlen)
}

func (r *rx) recv(dst [][]byte, mlen int) error {
	c := r.c
	n := int(r.hdr.PayloadLen)
	var misuse error
	if space := bufsLen(dst); mlen < 0 || mlen > n || mlen > space {
		misuse = fmt.Errorf("socklnd: Recv of %d bytes into %d from a %d-byte payload: draining it all", mlen, space, n)
		mlen = 0
	}
	var err error
	if n > 0 {
		c.nc.SetReadDeadline(time.Now().Add(c.ni.conf.Timeout))
		err = readInto(c.nc, dst, mlen)
		if err == nil && n > mlen {
			_, err = io.CopyN(io.Discard, c.nc, int64(n-mlen)) // io.Discard reads in pooled 8 KiB chunks
		}
		if err == nil {
			c.nc.SetReadDeadline(time.Time{})
		}
	}
	if err == nil {
		c.ni.stats.rxMsgs.Add(1)
		c.ni.stats.rxBytes.Add(uint64(wire.HeaderSize + n))
	} else if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // the header promised more
	}
	c.rxDone <- err
	if err != nil {
		return fmt.Errorf("socklnd: receive %v from %v: %w: %w", r.hdr.Type, c.p.nid, lnet.ErrConnReset, err)
	}
	return misuse
}

// readInto fills the first mlen bytes of dst, in order, from r.
func readInto(r io.Reader, dst [][]byte, mlen int) error {
	for _, d := range dst {
		if mlen == 0 {
			break
		}
		k := min(len(d), mlen)
		if _, err := io.ReadFull(r, d[:k]); err != nil {
			return err
		}
		mlen -= k
	}
	return nil
}

func bufsLen(b [][]byte) int {
	n := 0
	for _, f := range b {
		n += len(f)
	}
	return n
}

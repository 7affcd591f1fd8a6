package socklnd

// The socklnd protocol (Lustre's socklnd_proto.c): the hello each side sends
// first on a connection, what each side checks in the other's, and which
// connection type a message travels on. The byte layouts are lnet/wire's.

import (
	"errors"
	"fmt"
	"net"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// errBadHello marks a hello that decoded but does not fit this connection.
var errBadHello = errors.New("socklnd: unexpected hello")

// hello returns this NI's hello to peer for a connection of type t (as
// this side sees it), telling the peer which of its incarnations we think
// we are talking to (0: none yet).
func (ni *NI) hello(peer wire.NID, peerPID uint32, peerInc uint64, t wire.ConnType) wire.Hello {
	return wire.Hello{
		Version:        wire.HelloVersion,
		SrcNID:         ni.nid,
		DstNID:         peer,
		SrcPID:         ni.pid,
		DstPID:         peerPID,
		SrcIncarnation: ni.inc,
		DstIncarnation: peerInc,
		ConnType:       t,
		IPs:            ni.ips,
	}
}

func writeHello(nc net.Conn, h *wire.Hello) error {
	b, err := h.AppendBinary(make([]byte, 0, h.Size()))
	if err != nil {
		return err
	}
	_, err = nc.Write(b)
	return err
}

// activeHello is the dialing side of the handshake: send our hello, read
// the peer's answer and check it answers this connection.
func (ni *NI) activeHello(nc net.Conn, peer wire.NID, t wire.ConnType, pid uint32, inc uint64) (wire.Hello, error) {
	if pid == 0 {
		pid = wire.PIDAny // not known before the first handshake
	}
	out := ni.hello(peer, pid, inc, t)
	if err := writeHello(nc, &out); err != nil {
		return wire.Hello{}, fmt.Errorf("send hello: %w", err)
	}
	in, err := wire.ReadHello(nc)
	if err != nil {
		return wire.Hello{}, fmt.Errorf("read hello: %w", err)
	}
	switch {
	case in.SrcNID != peer:
		err = fmt.Errorf("%w: dialed %v, answered by %v", errBadHello, peer, in.SrcNID)
	case in.DstNID != ni.nid:
		err = fmt.Errorf("%w: answer addressed to %v", errBadHello, in.DstNID)
	case in.ConnType != t.Invert():
		err = fmt.Errorf("%w: asked for a %v connection, answer says %v", errBadHello, t, in.ConnType)
	case in.DstIncarnation != ni.inc:
		err = fmt.Errorf("%w: answer is for incarnation %d, ours is %d", errBadHello, in.DstIncarnation, ni.inc)
	}
	return in, err
}

// checkRequest checks the hello that opens an incoming connection. The
// destination must be this NI; the source must be another NID of this net.
// A destination incarnation that is not ours means the peer last spoke to
// an earlier run of this node; that is not refused, as the peer learns our
// new incarnation from the answer and fails its own stale traffic.
func (ni *NI) checkRequest(h *wire.Hello) error {
	switch {
	case h.DstNID != ni.nid:
		return fmt.Errorf("%w: addressed to %v, this is %v", errBadHello, h.DstNID, ni.nid)
	case h.SrcNID.Net != ni.nid.Net:
		return fmt.Errorf("%w: source %v is not on net %v", errBadHello, h.SrcNID, ni.nid.Net)
	case h.SrcNID == ni.nid:
		return fmt.Errorf("%w: source is this NI's own NID", errBadHello)
	case h.DstPID != ni.pid && h.DstPID != wire.PIDAny:
		return fmt.Errorf("%w: addressed to pid %d, this is pid %d", errBadHello, h.DstPID, ni.pid)
	}
	if h.DstIncarnation != 0 && h.DstIncarnation != ni.inc {
		ni.log.Info("socklnd: peer knew an earlier incarnation of this node", "peer", h.SrcNID.String(),
			"incarnation", h.DstIncarnation)
	}
	return nil
}

// isProtocolError tells a peer that spoke the protocol wrongly (worth a
// warning and a count) from one that hung up or timed out (a refused race,
// a dead peer: the dialer's business).
func isProtocolError(err error) bool {
	for _, e := range []error{errBadHello, wire.ErrBadMagic, wire.ErrBadVersion, wire.ErrBadNID,
		wire.ErrBadType, wire.ErrTooLong, wire.ErrBadField} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// txType is the connection type msg travels on from this side (Lustre's
// ksocknal_match_tx): small messages on the control connection, payloads of
// MinBulk and more on the bulk-out one, everything on one connection
// without typed connections.
func (ni *NI) txType(msg *lnet.Msg) wire.ConnType {
	switch {
	case !ni.conf.TypedConns:
		return wire.ConnAny
	case int(msg.Hdr.PayloadLen) >= ni.conf.MinBulk:
		return wire.ConnBulkOut
	}
	return wire.ConnControl
}

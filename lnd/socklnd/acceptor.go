package socklnd

// The passive side: the acceptor loop and the handshake of incoming
// connections (Lustre's lnet/lnet/acceptor.c and ksocknal_accept).

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// acceptLoop accepts connections until the listener is closed, handing each
// to a handshake goroutine; at most Config.MaxHandshakes run at once, so a
// flood of silent connections cannot pile up goroutines.
func (ni *NI) acceptLoop() {
	for {
		nc, err := ni.ln.Accept()
		if err != nil {
			if ni.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: say so, breathe, go on.
			ni.log.Warn("socklnd: accept failed", "err", err)
			if !sleep(ni.ctx, 10*time.Millisecond) {
				return
			}
			continue
		}
		tc := nc.(*net.TCPConn)
		select {
		case ni.hsSem <- struct{}{}:
		default:
			ni.stats.handshakeFailures.Add(1)
			ni.log.Warn("socklnd: too many handshakes in progress, closing connection",
				"remote", tc.RemoteAddr().String())
			tc.Close()
			continue
		}
		if !ni.spawn(func() {
			defer func() { <-ni.hsSem }()
			ni.accept(tc)
		}) {
			<-ni.hsSem
			tc.Close()
			return
		}
	}
}

// accept runs the passive handshake on tc: read the peer's hello, check it,
// decide the connection (installLocked), answer with our hello and start
// the connection. A bad hello is logged and the socket closed; the NI goes
// on serving everyone else.
func (ni *NI) accept(tc *net.TCPConn) {
	remote := tc.RemoteAddr().String()
	stop := context.AfterFunc(ni.ctx, func() { tc.Close() }) // Shutdown interrupts the hello
	tc.SetDeadline(time.Now().Add(ni.conf.HandshakeTimeout))
	h, err := wire.ReadHello(tc)
	if err == nil {
		err = ni.checkRequest(&h)
	}
	if err != nil {
		stop()
		tc.Close()
		if ni.closed.Load() {
			return
		}
		ni.stats.handshakeFailures.Add(1)
		ni.log.Warn("socklnd: handshake failed, closing connection", "remote", remote, "err", err)
		return
	}
	p, err := ni.lockPeer(h.SrcNID)
	if err != nil {
		stop()
		tc.Close()
		if !errors.Is(err, lnet.ErrShutdown) {
			// peer logged the full table, once a second at most.
			ni.stats.handshakeFailures.Add(1)
			ni.log.Debug("socklnd: handshake refused", "peer", h.SrcNID.String(), "remote", remote, "err", err)
		}
		return
	}
	c := ni.newConn(p, tc, h.ConnType.Invert(), false)
	var d deferred
	ok, why := ni.installLocked(p, c, &h, &d)
	p.mu.Unlock()
	ni.run(p, &d)
	if !ok {
		stop()
		tc.Close()
		ni.stats.connRaces.Add(1)
		ni.log.Debug("socklnd: incoming connection refused", "peer", h.SrcNID.String(),
			"type", c.typ.String(), "remote", remote, "reason", why)
		return
	}

	// Installed but not started: Send may queue for it, but nothing is
	// written on it before our hello.
	out := ni.hello(h.SrcNID, h.SrcPID, h.SrcIncarnation, c.typ)
	err = writeHello(tc, &out)
	if !stop() && err == nil {
		err = errors.New("NI shutting down")
	}
	if err != nil {
		ni.dropConn(c, slog.LevelWarn, "sending hello", err)
		close(c.wdone) // its writer never ran
		return
	}
	tc.SetDeadline(time.Time{})
	ni.startConn(c)
}

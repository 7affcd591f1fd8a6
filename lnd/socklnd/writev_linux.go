package socklnd

import (
	"net"
	"syscall"
	"unsafe"
)

// inlineWrites says whether Send may write a message on the caller's
// goroutine (see conn.sendInline); it needs nbWriter.
const inlineWrites = true

// combineWrites says whether an inline Send yields first, so that messages
// queued meanwhile go in the same writev (conn.combine).
const combineWrites = true

// maxIOV is the most vectors one writev takes (IOV_MAX).
const maxIOV = 1024

// nbWriter makes non-blocking vectored writes on one socket: the inline
// half of a connection's transmit path. Only the goroutine that owns the
// connection's write side (conn.busy) may use it.
type nbWriter struct {
	rc  syscall.RawConn
	iov []syscall.Iovec
	fn  func(fd uintptr) bool // w.writev, bound once
	n   int                   // result of the last writev
	err error
}

func (w *nbWriter) init(tc *net.TCPConn) {
	w.rc, _ = tc.SyscallConn() // fails only for a nil conn
	w.fn = w.writev
}

// write is one writev(2) of vec that never waits: it returns how many
// bytes the socket took, fewer than offered (maybe 0) with a nil error
// when its send buffer filled, or the error that broke the socket. It
// offers at most the first maxIOV views, and keeps no reference to them.
func (w *nbWriter) write(vec [][]byte) (int, error) {
	iov := w.iov[:0]
	for _, f := range vec[:min(len(vec), maxIOV)] {
		iov = append(iov, syscall.Iovec{Base: &f[0]})
		iov[len(iov)-1].SetLen(len(f))
	}
	w.iov = iov
	// RawConn.Write holds the socket's write lock and calls fn once: fn
	// reports done even on EAGAIN, so it never waits for the poller.
	err := w.rc.Write(w.fn)
	clear(iov) // do not keep the caller's buffers alive
	if err != nil {
		return 0, err
	}
	return w.n, w.err
}

func (w *nbWriter) writev(fd uintptr) bool {
	w.n, w.err = 0, nil
	for {
		n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(len(w.iov)))
		switch e {
		case 0:
			w.n = int(n)
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
		default:
			w.err = e
		}
		return true
	}
}

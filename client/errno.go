package client

import (
	"context"
	"errors"
	"io"
	"syscall"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
)

// errnoTable maps Nacre's error kinds that carry no errno of their own to
// the errno a POSIX caller gets: the one table the FUSE edge uses.
var errnoTable = []struct {
	err   error
	errno syscall.Errno
}{
	{context.DeadlineExceeded, syscall.EIO}, // a server stayed away past the timeout
	{context.Canceled, syscall.EINTR},
	{ptlrpc.ErrEvicted, syscall.EIO},
	{mdc.ErrBadReply, syscall.EIO},
	{ErrNoTarget, syscall.EIO},
	{layout.ErrUninstantiated, syscall.EIO},
	{ldlm.ErrWouldBlock, syscall.EAGAIN},
	{ldlm.ErrDeadlock, syscall.EDEADLK},
}

// Errno returns the errno err stands for: the one it wraps (an MDT's or
// OST's answer, a local check), else the table's, else EIO. nil and io.EOF
// are 0.
func Errno(err error) syscall.Errno {
	if err == nil || errors.Is(err, io.EOF) {
		return 0
	}
	for _, e := range errnoTable {
		if errors.Is(err, e.err) {
			return e.errno
		}
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return syscall.EIO
}

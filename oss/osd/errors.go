package osd

import (
	"context"
	"errors"
	"syscall"
)

// The errors every backend returns, wrapped with the device, object and range
// they concern. Callers branch with errors.Is; the PtlRPC edge turns them into
// errnos with Errno.
var (
	ErrExist    = errors.New("osd: object exists")                            // EEXIST
	ErrNotExist = errors.New("osd: no such object")                           // ENOENT
	ErrNoSpace  = errors.New("osd: no space left on device")                  // ENOSPC
	ErrInvalid  = errors.New("osd: invalid argument")                         // EINVAL
	ErrTooLarge = errors.New("osd: past the maximum object size")             // EFBIG
	ErrCorrupt  = errors.New("osd: corrupt")                                  // EIO
	ErrReadOnly = errors.New("osd: device is read-only after an I/O error")   // EROFS
	ErrClosed   = errors.New("osd: device closed")                            // ENODEV
	ErrBusy     = errors.New("osd: target in use by another process")         // EBUSY
	ErrTxDone   = errors.New("osd: transaction already committed or aborted") // EINVAL
	// ErrNotSupported: the store under the device cannot do it
	// (fallocate on a file system without it).
	ErrNotSupported = errors.New("osd: not supported by the store") // EOPNOTSUPP
)

var errnos = []struct {
	err   error
	errno syscall.Errno
}{
	{ErrExist, syscall.EEXIST},
	{ErrNotExist, syscall.ENOENT},
	{ErrNoSpace, syscall.ENOSPC},
	{ErrInvalid, syscall.EINVAL},
	{ErrTooLarge, syscall.EFBIG},
	{ErrCorrupt, syscall.EIO},
	{ErrReadOnly, syscall.EROFS},
	{ErrClosed, syscall.ENODEV},
	{ErrBusy, syscall.EBUSY},
	{ErrTxDone, syscall.EINVAL},
	{ErrNotSupported, syscall.EOPNOTSUPP},
	{context.Canceled, syscall.ECANCELED},
	{context.DeadlineExceeded, syscall.ETIMEDOUT},
}

// Errno maps an error from a Device or Tx to the Linux errno the OST puts on
// the wire: 0 for nil, the errno listed beside each sentinel above, ECANCELED
// and ETIMEDOUT for context errors, and EIO for anything else.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, e := range errnos {
		if errors.Is(err, e.err) {
			return e.errno
		}
	}
	return syscall.EIO
}

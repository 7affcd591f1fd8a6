package ldlm

import (
	"errors"
	"syscall"

	"github.com/nacrefs/nacre/internal/errs"
)

// Errors of the lock core. Every error a Namespace returns wraps exactly one
// of these (test with errors.Is) inside an *errs.Error whose Kind is noted
// below, with the namespace, the operation and the handle or request as
// context. A call that returns an error has changed nothing.
var (
	// ErrInvalid: the request makes no sense — an unknown type, mode or
	// flag; a mode the type does not take (GROUP off EXTENT, FLOCK other
	// than PR/PW/NL); empty or unknown inode bits; an extent whose start is
	// past its end; GROUP with group id 0; policy fields of another type;
	// an empty owner; converting a waiting lock, a FLOCK lock, or to a
	// stronger mode or more bits. Kind Invalid; errno EINVAL.
	ErrInvalid = errors.New("ldlm: invalid request")
	// ErrUnknownHandle: no lock of the namespace has this handle (never
	// issued, or the lock is gone). Kind NotExist; errno ESTALE.
	ErrUnknownHandle = errors.New("ldlm: unknown lock handle")
	// ErrUnknownResource: the resource has no locks, so it does not exist
	// (SetLVB). Kind NotExist; errno ENOENT.
	ErrUnknownResource = errors.New("ldlm: unknown resource")
	// ErrNotOwner: the lock belongs to another owner. Kind Permission;
	// errno EPERM.
	ErrNotOwner = errors.New("ldlm: lock belongs to another owner")
	// ErrWouldBlock: the request had BlockNoWait and conflicts; nothing
	// was queued and no blocking AST is due (Lustre's ELDLM_LOCK_ABORTED,
	// -EWOULDBLOCK; F_SETLK's EAGAIN). Kind Conflict; errno EAGAIN.
	ErrWouldBlock = errors.New("ldlm: lock would block")
	// ErrDeadlock: a FLOCK request would wait on an owner that waits,
	// directly or through others, on the requester. Returned by Enqueue
	// (nothing queued) or carried by a Failure when a queued request is
	// found in a cycle later. Kind Conflict; errno EDEADLK.
	ErrDeadlock = errors.New("ldlm: flock deadlock")
	// ErrNoObject: what ServerConfig.LVBInit returns when the target has
	// no object behind the resource (an OST object never created or
	// destroyed): the resource then has an empty LVB, and a glimpse does
	// not vouch for it. Kind NotExist; errno ENOENT.
	ErrNoObject = errors.New("ldlm: no object behind the resource")
)

var sentinels = []struct {
	err   error
	kind  errs.Kind
	errno syscall.Errno
}{
	{ErrInvalid, errs.Invalid, syscall.EINVAL},
	{ErrUnknownHandle, errs.NotExist, syscall.ESTALE},
	{ErrUnknownResource, errs.NotExist, syscall.ENOENT},
	{ErrNotOwner, errs.Permission, syscall.EPERM},
	{ErrWouldBlock, errs.Conflict, syscall.EAGAIN},
	{ErrDeadlock, errs.Conflict, syscall.EDEADLK},
	{ErrNoObject, errs.NotExist, syscall.ENOENT},
}

// Errno maps an error of this package to the errno the wire carries (only
// Lustre's "network errnos" are used). It returns 0 for nil and EIO for an
// error that wraps none of the sentinels.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.errno
		}
	}
	return syscall.EIO
}

// fail wraps sentinel with context and the sentinel's kind.
func fail(sentinel error, format string, args ...any) error {
	kind := errs.Other
	for _, s := range sentinels {
		if s.err == sentinel {
			kind = s.kind
		}
	}
	return errs.Errorf(kind, format+": %w", append(args, sentinel)...)
}

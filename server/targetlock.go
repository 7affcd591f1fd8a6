package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// targetLockFile, in a target directory, is locked (flock) by the process
// serving the target, and by whatever changes its store while it is
// stopped (RestoreReplayBarrier): one process on one target at a time, on
// this host, whatever its backend. Lustre's ldiskfs has multiple-mount
// protection for the same across hosts; Nacre has none yet.
const targetLockFile = "nacre-target.lock"

// lockTarget takes dir's target lock; release gives it back. A target
// another process holds is EBUSY.
func lockTarget(dir string) (release func(), err error) {
	p := filepath.Join(dir, targetLockFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("target %s: lock: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("target %s is in use by another process: %w", dir, syscall.EBUSY)
		}
		return nil, fmt.Errorf("target %s: lock: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

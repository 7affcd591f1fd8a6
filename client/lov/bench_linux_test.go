package lov_test

import (
	"os"
	"syscall"
)

// dropPageCache asks the kernel to forget f's cached pages
// (posix_fadvise POSIX_FADV_DONTNEED), so that reads go to the disk.
func dropPageCache(f *os.File, size int64) {
	const fadvDontNeed = 4
	syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, uintptr(size), fadvDontNeed, 0, 0)
}

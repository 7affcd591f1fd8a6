// Package pagecache tells what the kernel's page cache holds of a file and
// drops it: for tests of I/O that goes around the page cache (O_DIRECT).
package pagecache

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Resident returns, for each 4 KiB page of [from, to) of the file at path,
// whether the page cache holds it (mincore(2) of a mapping of the range).
func Resident(path string, from, to int64) ([]bool, error) {
	if from < 0 || to <= from {
		return nil, fmt.Errorf("pagecache: range [%d,%d)", from, to)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pagecache: %w", err)
	}
	defer unix.Close(fd)
	mem, err := unix.Mmap(fd, from, int(to-from), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("pagecache: map %s [%d,%d): %w", path, from, to, err)
	}
	defer unix.Munmap(mem)
	vec := make([]byte, (to-from+4095)/4096)
	// x/sys/unix has no wrapper for mincore(2).
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return nil, fmt.Errorf("pagecache: mincore %s: %w", path, errno)
	}
	out := make([]bool, len(vec))
	for i, v := range vec {
		out[i] = v&1 != 0
	}
	return out, nil
}

// Count returns how many pages of [from, to) of path the page cache holds.
func Count(path string, from, to int64) (int, error) {
	pages, err := Resident(path, from, to)
	n := 0
	for _, r := range pages {
		if r {
			n++
		}
	}
	return n, err
}

// Evict writes the file at path back and drops its pages from the page
// cache.
func Evict(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("pagecache: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("pagecache: fsync %s: %w", path, err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("pagecache: drop %s: %w", path, err)
	}
	return nil
}

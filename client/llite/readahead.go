package llite

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Kernel readahead on the mount. The kernel caps a FUSE mount's readahead
// at its default for block devices (128 KiB), whatever max_readahead the
// file system asks for at INIT, so a sequential reader through FUSE waits
// for a round trip every 128 KiB. The window can only be raised through
// the mount's backing device in sysfs, which is what the mount does: to
// max_read_ahead_mb, at most one full RPC's worth (the library reads
// ahead further on its own), never below the kernel's default (a window
// of 0 would make the kernel read one page per request).
const (
	kernelReadAheadMinKB = 128
	kernelReadAheadMaxKB = 4 << 10
)

// kernelReadAheadKB is the kernel's window for a mount whose library reads
// ahead up to mb MiB.
func kernelReadAheadKB(mb int) int {
	return min(max(mb<<10, kernelReadAheadMinKB), kernelReadAheadMaxKB)
}

// bdiReadAheadPath is the sysfs file of the kernel's readahead window for
// the file system mounted on dir.
func bdiReadAheadPath(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// setKernelReadAhead sets the kernel's readahead window of the mount on
// dir to kb KiB. It needs root (sysfs).
func setKernelReadAhead(dir string, kb int) error {
	p, err := bdiReadAheadPath(dir)
	if err != nil {
		return err
	}
	return os.WriteFile(p, []byte(strconv.Itoa(kb)+"\n"), 0)
}

// KernelReadAheadKB returns the kernel's readahead window, in KiB, of the
// file system mounted on dir.
func KernelReadAheadKB(dir string) (int, error) {
	p, err := bdiReadAheadPath(dir)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(bytes.TrimSpace(b)))
}

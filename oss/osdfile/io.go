package osdfile

import (
	"errors"
	"io"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/iovec"
)

// iovMax is the kernel's limit on buffers per preadv/pwritev (IOV_MAX).
const iovMax = 1024

// advance returns bufs without their first n bytes. It allocates only when
// n ends inside a buffer.
func advance(bufs [][]byte, n int) [][]byte {
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if n == 0 || len(bufs) == 0 {
		return bufs
	}
	rest := make([][]byte, len(bufs))
	copy(rest, bufs)
	rest[0] = rest[0][n:]
	return rest
}

// limit returns the first n bytes of bufs (n at most their length).
func limit(bufs [][]byte, n int) [][]byte {
	for i, b := range bufs {
		if n <= len(b) {
			if n == len(b) && i == len(bufs)-1 {
				return bufs
			}
			out := make([][]byte, i+1)
			copy(out, bufs[:i+1])
			out[i] = b[:n]
			return out
		}
		n -= len(b)
	}
	return bufs
}

// pwritevFull writes all of bufs at off, straight from them, retrying short
// writes and EINTR. It returns how many bytes reached the file.
func pwritevFull(fd int, bufs [][]byte, off int64) (int, error) {
	done := 0
	for len(bufs) > 0 {
		chunk := bufs[:min(len(bufs), iovMax)]
		n, err := unix.Pwritev(fd, chunk, off+int64(done))
		if n > 0 {
			done += n
			bufs = advance(bufs, n)
		}
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return done, err
		case n == 0 && iovec.Len(chunk) > 0:
			return done, io.ErrShortWrite
		default:
			// Skip buffers of length zero, which a pwritev of only
			// them would never consume.
			for len(bufs) > 0 && len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
	}
	return done, nil
}

// preadvFull fills bufs from off, straight into them, until they are full or
// the file ends. It returns how many bytes it read.
func preadvFull(fd int, bufs [][]byte, off int64) (int, error) {
	done := 0
	for len(bufs) > 0 {
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if len(bufs) == 0 {
			break
		}
		chunk := bufs[:min(len(bufs), iovMax)]
		n, err := unix.Preadv(fd, chunk, off+int64(done))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, nil // end of file
		}
		done += n
		bufs = advance(bufs, n)
	}
	return done, nil
}

// zeroBufs zeroes n bytes of bufs from byte at.
func zeroBufs(bufs [][]byte, at, n int) {
	for _, b := range bufs {
		if n <= 0 {
			return
		}
		if at >= len(b) {
			at -= len(b)
			continue
		}
		k := min(len(b)-at, n)
		clear(b[at : at+k])
		n -= k
		at = 0
	}
}

// copyIntoBufs copies src into bufs from byte at.
func copyIntoBufs(bufs [][]byte, at int, src []byte) {
	for _, b := range bufs {
		if len(src) == 0 {
			return
		}
		if at >= len(b) {
			at -= len(b)
			continue
		}
		k := copy(b[at:], src)
		src = src[k:]
		at = 0
	}
}

// pwriteFull writes all of b at off.
func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// ignoreEINTR retries f while it fails with EINTR.
func ignoreEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

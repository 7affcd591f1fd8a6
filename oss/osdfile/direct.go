package osdfile

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/oss/osd"
)

// directAlign is what O_DIRECT asks of file offsets, lengths and memory
// addresses on the stores osd-file runs on: the logical block size of
// 4 KiB-sector disks (512-byte-sector ones accept it too).
const directAlign = 4096

// writeData writes a bulk write's bufs at off into o's file, whose buffered
// descriptor is fd, and returns how many bytes from the start reached it.
//
// With Config.DirectWriteMin set, a large write goes around the page cache
// (O_DIRECT) for its block-aligned middle, as osd-ldiskfs sends I/O above
// writethrough_max_io_mb straight to the disk: a buffered write costs the
// OSS a copy into freshly allocated page-cache pages and later their
// writeback, which on a small server is CPU the network needs, and the
// pages would mostly push out data that is read more. But a direct write
// holds its handler until the disk has it, and ext4 serializes those that
// extend a file (every streaming write does), so where the disk is slow to
// complete each, the page cache's writeback is faster: DirectWriteMin is 0
// by default. The unaligned head and tail, small writes, and stores that do
// not take O_DIRECT go through the page cache. The kernel keeps the two
// ways coherent (a direct write flushes and drops cached pages of its
// range), and the committer's fsync makes either durable.
func (d *Device) writeData(o *object, fd int, bufs [][]byte, off int64) (int, error) {
	if dmin := int(d.directMin.Load()); dmin <= 0 || d.noDirect.Load() || len(bufs) != 1 || len(bufs[0]) < dmin {
		return pwritevFull(fd, bufs, off)
	}
	b := bufs[0]
	head := int((directAlign - off%directAlign) % directAlign)
	if head >= len(b) {
		return pwritevFull(fd, bufs, off)
	}
	mid := (len(b) - head) &^ (directAlign - 1)
	if mid == 0 || uintptr(unsafe.Pointer(&b[head]))%directAlign != 0 {
		return pwritevFull(fd, bufs, off)
	}
	done := 0
	if head > 0 {
		n, err := pwritevFull(fd, [][]byte{b[:head]}, off)
		done += n
		if err != nil {
			return done, err
		}
	}
	n, err := d.pwriteDirect(o, b[head:head+mid], off+int64(head))
	done += n
	if err != nil {
		return done, err
	}
	if done == len(b) {
		return done, nil
	}
	// The tail, and whatever a short direct write left.
	n, err = pwritevFull(fd, [][]byte{b[done:]}, off+int64(done))
	return done + n, err
}

// readData reads into bufs from off in o's file, whose buffered descriptor
// is fd, until they are full or the file ends, and returns how many bytes
// it read.
//
// With Config.DirectReadMin set, a read of at least that many bytes into
// one block-aligned buffer, of a range the page cache holds none of, reads
// its whole blocks with O_DIRECT: the disk puts them in the buffer, and
// the OSS spends no processor on the page cache's allocation nor on a
// copy out of it (see Config.DirectReadMin for what it costs). A range the page cache holds some of (written lately, or read by small
// requests) reads through it, as do small reads, a tail shorter than a
// block, and stores that refuse O_DIRECT. A direct read sees what
// buffered writes left dirty: the kernel writes the range back first.
func (d *Device) readData(o *object, fd int, bufs [][]byte, off int64) (int, error) {
	dmin := int(d.directReadMin.Load())
	if dmin <= 0 || d.noDirect.Load() || len(bufs) != 1 || len(bufs[0]) < dmin || off%directAlign != 0 {
		return preadvFull(fd, bufs, off)
	}
	b := bufs[0]
	whole := len(b) &^ (directAlign - 1)
	if uintptr(unsafe.Pointer(&b[0]))%directAlign != 0 || d.cached(fd, off, len(b)) {
		return preadvFull(fd, bufs, off)
	}
	done, err := d.preadDirect(o, b[:whole], off)
	if err != nil || done < whole && done%directAlign != 0 {
		return done, err // (a short direct read ends at the end of the file)
	}
	if done < len(b) {
		n, err := preadvFull(fd, [][]byte{b[done:]}, off+int64(done))
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// cached reports whether the page cache holds any of [off, off+n) of fd's
// file, or may (cachestat(2) failed: the kernel has none, before 6.5).
func (d *Device) cached(fd int, off int64, n int) bool {
	if d.noCachestat.Load() {
		return true
	}
	var cs unix.Cachestat_t
	err := unix.Cachestat(uint(fd), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &cs, 0)
	if errors.Is(err, unix.ENOSYS) {
		if d.noCachestat.CompareAndSwap(false, true) {
			d.log.Info("osd-file: the kernel has no cachestat(2); bulk reads go through the page cache", "dir", d.dir)
		}
		return true
	}
	return err != nil || cs.Cache > 0
}

// preadDirect reads into b from off through a descriptor of o's file
// opened with O_DIRECT; b's length and address and off are block-aligned.
// It returns how many bytes it read: fewer than len(b) at the end of the
// file, or none when the store refuses O_DIRECT (which turns direct I/O
// off for the device), for the buffered path to read.
func (d *Device) preadDirect(o *object, b []byte, off int64) (int, error) {
	return d.direct(o, b, off, unix.Pread)
}

// direct does op (pread or pwrite) of b at off through a descriptor of
// o's file opened with O_DIRECT, until b is done, op moves nothing (the
// end of the file, no space) or a part of a block (the end of the file, a
// partial write), and returns the bytes moved: the rest is for the
// buffered path, which reports what stops it. A store that refuses
// O_DIRECT (EINVAL at the open or at the first op, before anything moved)
// turns direct I/O off for the device, and nothing moves.
func (d *Device) direct(o *object, b []byte, off int64, op func(fd int, p []byte, off int64) (int, error)) (int, error) {
	dfd, err := openFile(o.path, unix.O_DIRECT)
	if errors.Is(err, unix.EINVAL) {
		d.refuseDirect(err)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(dfd)
	done := 0
	for done < len(b) {
		n, err := op(dfd, b[done:], off+int64(done))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EINVAL) && done == 0:
			d.refuseDirect(err)
			return 0, nil
		case err != nil:
			return done, err
		case n <= 0:
			return done, nil
		}
		done += n
		if n%directAlign != 0 {
			return done, nil
		}
	}
	return done, nil
}

// DirectReadMin returns the size from which bulk reads of data the page
// cache does not hold go around it (0: never).
func (d *Device) DirectReadMin() int { return int(d.directReadMin.Load()) }

// SetDirectReadMin changes it at run time (the OST's
// osd-file.*.direct_read_min_kb).
func (d *Device) SetDirectReadMin(n int) error {
	if n < 0 {
		return d.errorf("direct read min %d: %w", n, osd.ErrInvalid)
	}
	d.directReadMin.Store(int64(n))
	return nil
}

// pwriteDirect writes b at off through a descriptor of o's file opened with
// O_DIRECT. It returns how many bytes it wrote; fewer than len(b) without an
// error means the rest is for the buffered path. A store that refuses
// O_DIRECT (EINVAL at open or at the first write, before anything is
// written) turns direct writes off for the device.
func (d *Device) pwriteDirect(o *object, b []byte, off int64) (int, error) {
	return d.direct(o, b, off, unix.Pwrite)
}

// DirectWriteMin returns the size from which bulk writes go around the
// page cache (0: never).
func (d *Device) DirectWriteMin() int { return int(d.directMin.Load()) }

// SetDirectWriteMin changes it at run time (the OST's
// osd-file.*.direct_write_min_kb): 0 sends every write through the page
// cache, which keeps freshly written data there for readers, at the cost
// of the copy and the writeback.
func (d *Device) SetDirectWriteMin(n int) error {
	if n < 0 {
		return d.errorf("direct write min %d: %w", n, osd.ErrInvalid)
	}
	d.directMin.Store(int64(n))
	return nil
}

// refuseDirect turns direct I/O off for the device, once.
func (d *Device) refuseDirect(err error) {
	if d.noDirect.CompareAndSwap(false, true) {
		d.log.Warn("osd-file: the store refuses O_DIRECT; bulk reads and writes go through the page cache", "dir", d.dir, "err", err)
	}
}

package llite

import (
	"context"
	"errors"
	"io"
	"math"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/client/osc"
)

// handle is an open file: the library's File. go-fuse calls its methods
// concurrently (reads and writes of one handle may overlap); the File is
// safe for that.
type handle struct {
	m      *mount
	f      *client.File
	append bool
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileGetlker   = (*handle)(nil)
	_ fs.FileSetlker   = (*handle)(nil)
	_ fs.FileSetlkwer  = (*handle)(nil)
	_ fs.FileLseeker   = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
)

// newHandle wraps an open File and says how the kernel caches it: pages
// kept across opens (the library's lock callbacks drop them), except for
// O_APPEND, which bypasses the page cache (see doc.go).
func (m *mount) newHandle(f *client.File, flags uint32) (*handle, uint32) {
	h := &handle{m: m, f: f, append: flags&syscall.O_APPEND != 0}
	if h.append {
		return h, fuse.FOPEN_DIRECT_IO
	}
	return h, fuse.FOPEN_KEEP_CACHE
}

// Read reads at off: short at the end of the file.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	fid := h.f.FID()
	h.m.n.beginIO(fid)
	defer h.m.n.endIO(fid)
	ctx, _, done := h.m.req(ctx)
	defer done()
	if h.append {
		// Direct I/O, which the kernel does not serialize with writes
		// page by page as it does cached reads: a copy taken under the
		// object's lock, not pinned pages a write would wait for.
		n, err := h.f.ReadAt(ctx, dest, off)
		if err != nil && !errors.Is(err, io.EOF) && n == 0 {
			return nil, h.m.errno(err, "read", fid, "off", off, "len", len(dest))
		}
		return fuse.ReadResultData(dest[:n]), 0
	}
	r := &vecResult{}
	n, err := h.f.ReadVec(ctx, &r.v, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		r.v.Release()
		return nil, h.m.errno(err, "read", fid, "off", off, "len", len(dest))
	}
	if n == 0 {
		r.v.Release()
		return fuse.ReadResultData(nil), 0
	}
	return r, 0
}

// vecResult is a read's reply made of the cached pages themselves: go-fuse
// writes the slices to the kernel with one writev and then calls Done,
// which unpins them. No copy of the bytes is made in this process.
type vecResult struct{ v osc.Vec }

// Size returns the bytes of the reply.
func (r *vecResult) Size() int { return r.v.Len() }

// Slices returns the reply's bytes for go-fuse's writev.
func (r *vecResult) Slices() ([][]byte, fuse.Status) { return r.v.Bufs(), fuse.OK }

// Bytes copies the bytes into buf, for a path of go-fuse's that does not
// write slices.
func (r *vecResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, b := range r.v.Bufs() {
		buf = append(buf, b...)
	}
	return buf, fuse.OK
}

// Done unpins the pages once go-fuse has written the reply (or dropped it).
func (r *vecResult) Done() { r.v.Release() }

// Write writes at off, or, for a file opened O_APPEND, at the end of the
// file, atomically (the kernel's offset is only its guess of the end);
// but the kernel's write-back of a shared mapping's pages goes at off
// whatever the open (see rawFS.Write).
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	fid := h.f.FID()
	h.m.n.beginIO(fid)
	defer h.m.n.endIO(fid)
	if h.append && h.m.isWriteBack(ctx) {
		ctx, _, done := h.m.req(ctx)
		defer done()
		n, err := h.f.WriteAtOffset(ctx, data, off)
		if err != nil && n == 0 {
			// The kernel keeps the page it could not write back (an
			// append-only file's, say) as if it had: it must read the
			// file's again.
			h.m.n.invalidateDataAsync(fid)
			return 0, h.m.errno(err, "write back", fid, "off", off, "len", len(data))
		}
		return uint32(n), 0
	}
	kill := h.m.writeFlagsOf(ctx)&fuse.WRITE_KILL_SUIDGID != 0
	ctx, cred, done := h.m.req(ctx)
	defer done()
	n, at, err := h.f.WriteAt(ctx, data, off)
	if h.append && n > 0 && at != off {
		// Other opens of the file here may cache pages where the data
		// went.
		h.m.n.invalidateDataAsync(fid)
	}
	if err != nil && n == 0 {
		return 0, h.m.errno(err, "write", fid, "off", off, "len", len(data))
	}
	if kill && n > 0 {
		h.killSetID(ctx, cred)
	}
	return uint32(n), 0
}

// killSetID clears the file's set-user-ID bit, and its set-group-ID bit
// if group-executable, after a write that asks so (should_remove_suid):
// the store lets a writer who is not the owner do that much.
func (h *handle) killSetID(ctx context.Context, cred client.Cred) {
	fid := h.f.FID()
	// The mode the client caches (under its lock): the kernel flags
	// every append of a caller without CAP_FSETID, set-ID file or not.
	mode, err := h.m.fs.Mode(ctx, cred, fid)
	if err != nil {
		return
	}
	kill := mode & syscall.S_ISUID
	if mode&(syscall.S_ISGID|0o010) == syscall.S_ISGID|0o010 {
		kill |= syscall.S_ISGID
	}
	if kill == 0 {
		return
	}
	if _, err := h.m.fs.Setattr(ctx, cred, fid, client.SetAttr{Valid: mdc.AttrMode, Mode: mode &^ kill & 0o7777}); err != nil {
		h.m.log.Warn("llite: clear the set-ID bits after a write", "fid", fid, "err", err)
	}
}

// Allocate is fallocate(2): blocks reserved on the OSTs (mode 0,
// FALLOC_FL_KEEP_SIZE) or a hole punched (FALLOC_FL_PUNCH_HOLE with
// KEEP_SIZE); other modes are EOPNOTSUPP. The kernel drops its own pages
// of a punched range and moves the size of a grown file.
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	fid := h.f.FID()
	if off > math.MaxInt64 || size > math.MaxInt64 {
		return syscall.EFBIG
	}
	h.m.n.beginIO(fid)
	defer h.m.n.endIO(fid)
	ctx, _, done := h.m.req(ctx)
	defer done()
	if err := h.f.Fallocate(ctx, mode, int64(off), int64(size)); err != nil {
		return h.m.errno(err, "fallocate", fid, "off", off, "len", size, "mode", mode)
	}
	return 0
}

// Flush writes back the file's dirty data at close(2) (close-to-open: the
// next open anywhere sees it).
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	ctx, _, done := h.m.req(ctx)
	defer done()
	if err := h.f.Flush(ctx); err != nil {
		return h.m.errno(err, "flush", h.f.FID())
	}
	return 0
}

// Fsync makes the file's data durable.
func (h *handle) Fsync(ctx context.Context, _ uint32) syscall.Errno {
	ctx, _, done := h.m.req(ctx)
	defer done()
	if err := h.f.Sync(ctx); err != nil {
		return h.m.errno(err, "fsync", h.f.FID())
	}
	return 0
}

// Release closes the file (the kernel's last reference went).
func (h *handle) Release(ctx context.Context) syscall.Errno {
	ctx, _, done := h.m.req(ctx)
	defer done()
	if err := h.f.Close(ctx); err != nil {
		return h.m.errno(err, "close", h.f.FID())
	}
	return 0
}

// Lseek answers SEEK_DATA and SEEK_HOLE (the kernel does the other
// whences itself) as Linux's generic_file_llseek does for a file system
// that does not track holes: the whole file is data, with one hole at its
// end. An offset at or past the end (or negative) is ENXIO for both, as
// on ext4; the size is the objects' now.
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	if whence != unix.SEEK_DATA && whence != unix.SEEK_HOLE {
		return 0, syscall.EINVAL
	}
	ctx, _, done := h.m.req(ctx)
	defer done()
	size, err := h.f.Size(ctx)
	if err != nil {
		return 0, h.m.errno(err, "lseek", h.f.FID(), "off", off, "whence", whence)
	}
	if off >= uint64(size) {
		return 0, syscall.ENXIO
	}
	if whence == unix.SEEK_HOLE {
		return uint64(size), 0
	}
	return off, 0
}

// offsetMax is the kernel's end of every file in lock ranges.
const offsetMax = math.MaxInt64

func lockRange(lk *fuse.FileLock) client.LockRange {
	lr := client.LockRange{Type: int(lk.Typ), Start: lk.Start, End: lk.End, PID: lk.Pid}
	if lk.End >= offsetMax {
		lr.End = client.EOF
	}
	return lr
}

func fuseLock(lr client.LockRange, out *fuse.FileLock) {
	out.Typ, out.Start, out.End, out.Pid = uint32(lr.Type), lr.Start, lr.End, lr.PID
	if lr.End >= offsetMax {
		out.End = offsetMax
	}
	if out.Start > out.End {
		out.Start = out.End
	}
}

// Getlk returns a lock that keeps owner from taking lk (F_GETLK), or lk
// with type F_UNLCK.
func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	ctx, _, done := h.m.req(ctx)
	defer done()
	lr, err := h.m.fs.GetLock(ctx, h.f.FID(), owner, lockRange(lk))
	if err != nil {
		return h.m.errno(err, "getlk", h.f.FID(), "owner", owner)
	}
	if lr.Type == client.LockUnlock {
		lr = lockRange(lk)
		lr.Type, lr.PID = client.LockUnlock, 0
	}
	fuseLock(lr, out)
	return 0
}

// Setlk takes, changes or drops owner's lock lk without waiting (EAGAIN
// on a conflict); flock() locks (LK_FLOCK) are whole-file locks of the
// open file.
func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	ctx, _, done := h.m.req(ctx)
	defer done()
	return h.setlk(ctx, owner, lk, false)
}

// Setlkw is Setlk waiting for the lock; an interrupt (a signal to the
// waiting process) ends the wait with EINTR, a deadlock with EDEADLK.
func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.setlk(ctx, owner, lk, true)
}

func (h *handle) setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, wait bool) syscall.Errno {
	fid := h.f.FID()
	if lk.Typ != syscall.F_UNLCK {
		h.m.noteLocker(nodeID(h.m.root, fid), fid, owner)
	}
	if err := h.m.fs.SetLock(ctx, fid, owner, lockRange(lk), wait); err != nil {
		return h.m.errno(err, "setlk", fid, "owner", owner, "type", lk.Typ, "start", lk.Start, "end", lk.End)
	}
	if lk.Typ != syscall.F_UNLCK {
		// Again: a FLUSH of another descriptor of the file while the lock
		// waited forgot the owner, and the lock it now holds must go at
		// the next close.
		h.m.noteLocker(nodeID(h.m.root, fid), fid, owner)
	}
	return 0
}

package osdfile

import (
	"container/list"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
)

// buckets is how many d<N> directories each sequence has (Lustre's
// OSD_OST_MAP_SIZE).
const buckets = 32

// pendKind is the kind of a pending change.
type pendKind uint8

const (
	pendPunch    pendKind = iota + 1 // bytes [a,b) become a hole
	pendTruncate                     // the file ends at a
	pendRecord                       // data lands at a
	pendUnlink                       // the file goes
)

// pending is a journaled change to an object's file that is committed, so
// visible, but not yet applied to the file: it is applied only once its
// journal record is durable, so that a crash cannot leave it half done. Reads
// lay pending changes over what the file holds; bulk writes and creates wait
// until there are none (they reach the file ahead of the journal, and must
// land after the changes committed before them).
type pending struct {
	lsn  uint64
	kind pendKind
	a, b uint64
	data []byte // pendRecord; points into the journal record, never changed
}

// object is the in-memory state of one object, cached while in use and up to
// Config.MaxCachedObjects more.
type object struct {
	fid  fid.FID
	path string

	// lock is the object lock (Lustre's dt_read_lock/dt_write_lock): held
	// shared by ReadAt, GetAttr and a Tx whose only steps on this object
	// are WriteAt; exclusively by a Tx with any other step on it. A Tx
	// takes the locks of all its objects in FID order.
	lock sync.RWMutex

	mu struct {
		sync.Mutex
		loaded  bool
		loadErr error    // sticky: the stored attributes do not check out
		exists  bool     // as of the last committed transaction
		attr    osd.Attr // likewise; Blocks is taken from the file when asked
		// fd is the object's file, open while it exists (and, for a
		// destroyed object, until the unlink is applied). Only Tx
		// commits holding the object lock exclusively, the committer
		// and eviction change it.
		fd int
		// pend lists committed changes not yet applied to the file, in
		// LSN order; drained is non-nil while pend is non-empty and is
		// closed when it empties.
		pend    []pending
		drained chan struct{}
		// staleTail means the file may hold bytes past attr.Size from a
		// failed write; a Tx holding the lock exclusively cuts them off
		// before anything can grow the object over them.
		staleTail bool
		// allocEnd is the end of the blocks committed allocations
		// (Tx.Allocate) reserved, as far as this process saw them: a
		// failed Tx's undo leaves them alone. 0 when not known.
		allocEnd uint64
		// A lazy object (lazy.go): fileless while it exists without a
		// file (fd is -1), made by record createLSN with lazyAttr;
		// createApplied once that record is applied.
		fileless, createApplied bool
		createLSN               uint64
		lazyAttr                osd.Attr
		// staleFile: a file without attributes is at the path (a
		// create that never committed left it), so the next create
		// makes its file at once, truncating it. dirUnsynced: a Tx
		// made the object's file (materialize), and its directory
		// entry is not yet known durable: the next record on the
		// object syncs the directory.
		staleFile, dirUnsynced bool
	}

	// refs and elem are protected by Device.mu: refs counts users (calls
	// in flight and queued journal records); an object with none sits on
	// the LRU list at elem.
	refs int
	elem *list.Element
}

// addPendingLocked queues a pending change. o.mu must be held.
func (o *object) addPendingLocked(p pending) {
	if len(o.mu.pend) == 0 {
		o.mu.drained = make(chan struct{})
	}
	o.mu.pend = append(o.mu.pend, p)
}

// staleFile reports whether a file that is not an object sits at o's path.
func (o *object) staleFile() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.staleFile
}

// appliedThrough drops the pending changes of records up to lsn, which the
// committer has applied to the file.
func (o *object) appliedThrough(lsn uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := 0
	for i < len(o.mu.pend) && o.mu.pend[i].lsn <= lsn {
		i++
	}
	if i == 0 {
		return
	}
	o.mu.pend = o.mu.pend[i:]
	if len(o.mu.pend) == 0 {
		o.mu.pend = nil
		close(o.mu.drained)
		o.mu.drained = nil
	}
}

// objPath returns where f's file lives: O/<seq hex>/d<oid%32>/<oid hex>,
// with ".<ver hex>" appended for a non-zero version.
func objPath(dir string, f fid.FID) string {
	name := strconv.FormatUint(uint64(f.Oid), 16)
	if f.Ver != 0 {
		name += "." + strconv.FormatUint(uint64(f.Ver), 16)
	}
	return filepath.Join(bucketDir(dir, f), name)
}

func seqDir(dir string, f fid.FID) string {
	return filepath.Join(dir, objectsDir, strconv.FormatUint(f.Seq, 16))
}

func bucketDir(dir string, f fid.FID) string {
	return filepath.Join(seqDir(dir, f), "d"+strconv.Itoa(int(f.Oid%buckets)))
}

// openFile opens an object file for reading and writing, without atime
// updates where the kernel lets us.
func openFile(path string, flags int) (int, error) {
	for _, noatime := range []int{unix.O_NOATIME, 0} {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|flags|noatime, 0o644)
		if errors.Is(err, unix.EINTR) {
			fd, err = unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|flags|noatime, 0o644)
		}
		if errors.Is(err, unix.EPERM) && noatime != 0 {
			continue
		}
		if err == nil && flags&unix.O_DIRECT == 0 {
			// Objects are read in RPCs of up to 4 MiB, several in flight
			// at once at neighbouring offsets of the one descriptor,
			// whose read-ahead state they share: the window a sequential
			// hint doubles keeps the disk busy ahead of them (nacre
			// bench seqread from a cold cache, six alternating rounds:
			// 964 -> 1044 MiB/s with one job, 968 -> 1068 with four).
			// Random readers lose nothing: the kernel reads ahead only
			// for reads it finds sequential.
			unix.Fadvise(fd, 0, 0, unix.FADV_SEQUENTIAL)
		}
		return fd, err
	}
	panic("unreachable")
}

// readLMA reads an object file's lma attribute. It returns unix.ENODATA if
// the file has none (an object whose creation never committed).
func readLMA(fd int, name string, f fid.FID) (uint64, osd.Attr, error) {
	var buf [lmaSize + 1]byte
	var n int
	err := ignoreEINTR(func() (err error) { n, err = unix.Fgetxattr(fd, name, buf[:]); return err })
	if err != nil {
		if errors.Is(err, unix.ERANGE) {
			return 0, osd.Attr{}, fmt.Errorf("%w: lma larger than %d bytes", osd.ErrCorrupt, lmaSize)
		}
		return 0, osd.Attr{}, err
	}
	lsn, a, err := decodeLMA(buf[:n], f)
	if err != nil {
		return 0, a, fmt.Errorf("%w: %v", osd.ErrCorrupt, err)
	}
	return lsn, a, nil
}

// punchFile makes [start, end) of fd a hole, keeping the size; where the file
// system cannot punch, it writes zeros over the part inside the file.
func punchFile(fd int, start, end uint64) error {
	if end > osd.MaxObjectSize {
		end = osd.MaxObjectSize
	}
	if start >= end {
		return nil
	}
	err := ignoreEINTR(func() error {
		return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(start), int64(end-start))
	})
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	end = min(end, uint64(st.Size))
	zero := make([]byte, min(1<<20, max(end-start, 1)))
	for off := start; off < end; off += uint64(len(zero)) {
		if err := pwriteFull(fd, zero[:min(uint64(len(zero)), end-off)], int64(off)); err != nil {
			return err
		}
	}
	return nil
}

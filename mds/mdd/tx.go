package mdd

import (
	"errors"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// tx gathers one operation's reads and writes. Reads see the state of the
// last applied operation (the store's lock keeps it still); writes go to
// one batch applied at commit, so an operation is all or nothing. Inodes
// read through the tx are cached so that an operation touching one inode
// twice (rename within a directory) sees its own changes.
type tx struct {
	s      *Store
	r      *Req
	b      *pebble.Batch
	now    int64
	inodes map[fid.FID]*inode
	dirty  map[fid.FID]bool
	cl     []ChangelogRecord

	inodeDelta int64
	destroys   []DestroyRecord
	orphansOff []fid.FID          // orphans destroyed: forget their open counts
	lastObj    map[uint32]fid.FID // OSTs' last objects raised by this tx
	// absent are keys of cached kinds the tx knows do not exist once it
	// commits (a new inode's LSOM): the cache learns so, sparing the first
	// getattr a Pebble miss.
	absent [][]byte
	// added are the entries the tx adds and newDirs the directories it
	// makes, for the name filters once it commits.
	added   []dirName
	newDirs []fid.FID
	// ro marks a read tx (Store.read): its inodes are the value cache's
	// own, shared and never changed, so that a lookup copies none.
	ro bool
}

type dirName struct {
	dir  fid.FID
	name string
}

// begin takes the store's write lock and starts a tx; the caller must end
// it with commit or abort.
func (s *Store) begin(r *Req) *tx {
	s.mu.Lock()
	now := r.Time
	if now == 0 {
		now = s.cfg.Now().UnixNano()
	}
	return &tx{s: s, r: r, b: s.db.NewBatch(), now: now, inodes: map[fid.FID]*inode{}, dirty: map[fid.FID]bool{}}
}

// read starts a read-only tx under the read lock; end it with done.
func (s *Store) read(r *Req) tx {
	s.mu.RLock()
	return tx{s: s, r: r, ro: true} // a value, on the caller's stack
}

func (t *tx) done() { t.s.mu.RUnlock() }

func (t *tx) abort() {
	t.b.Close()
	t.s.mu.Unlock()
}

// finish aborts on err and commits otherwise, returning the first error.
func (t *tx) finish(err error) error {
	if err != nil {
		t.abort()
		return err
	}
	return t.commit()
}

// commit numbers the change, writes the dirty inodes, the changelog
// records and the counters, and applies the batch without syncing.
func (t *tx) commit() error {
	s := t.s
	defer s.mu.Unlock()
	defer t.b.Close()
	for f := range t.dirty {
		if n := t.inodes[f]; n != nil {
			t.b.Set(fidKey(pfxInode, f), n.marshal(), nil)
			s.noteOIDLocked(f) // before the commit: a failed one may be in
		}
	}
	clNext := s.mu.clNext
	if len(s.mu.clUsers) > 0 {
		for i := range t.cl {
			rec := &t.cl[i]
			rec.Index, rec.Time, rec.UID, rec.GID = clNext, t.now, t.r.Cred.UID, t.r.Cred.GID
			t.b.Set(u64Key(pfxCLRec, clNext), rec.marshal(), nil)
			clNext++
		}
		t.b.Set(keyCLNext, u64Val(clNext), nil)
	}
	destroyNext := s.mu.destroyNext
	for i := range t.destroys {
		d := &t.destroys[i]
		d.ID = destroyNext
		destroyNext++
		v, err := d.marshal()
		if err != nil {
			return ioError(err, "destroy record for %v", d.FID)
		}
		t.b.Set(u64Key(pfxDestroy, d.ID), v, nil)
	}
	if len(t.destroys) > 0 {
		t.b.Set(keyDestroy, u64Val(destroyNext), nil)
	}
	inodes := uint64(int64(s.mu.inodes) + t.inodeDelta)
	if t.inodeDelta != 0 {
		t.b.Set(keyInodes, u64Val(inodes), nil)
	}
	// With nothing to write (a close that changed only the open counts,
	// say) no transno is taken and no batch applied: a request that needs
	// a transno gets one from its target.
	tn := t.r.Transno
	if tn != 0 || !t.b.Empty() {
		if tn == 0 && t.r.AssignTransno != nil {
			tn = t.r.AssignTransno()
		}
		if tn > s.mu.transno {
			t.b.Set(keyTransno, u64Val(tn), nil)
		}
		if err := t.b.Commit(pebble.NoSync); err != nil {
			s.cache.reset() // the batch may or may not be in
			s.names.reset()
			return ioError(err, "commit")
		}
	}
	for _, k := range t.absent {
		s.cache.noteAbsent(k)
	}
	s.cache.applied(t.b) // after: what the batch wrote wins over a note
	for _, d := range t.newDirs {
		s.names.track(d)
	}
	for _, a := range t.added {
		s.names.added(a.dir, a.name)
	}
	s.mu.clNext, s.mu.destroyNext, s.mu.inodes = clNext, destroyNext, inodes
	s.mu.transno = max(s.mu.transno, tn)
	for ost, f := range t.lastObj {
		s.mu.lastObj[ost] = f
	}
	for _, f := range t.orphansOff {
		delete(s.mu.opens, f)
		delete(s.mu.writers, f)
	}
	return nil
}

// inode returns the inode f, ENOENT if there is none.
func (t *tx) inode(f fid.FID) (*inode, error) {
	if n, ok := t.inodes[f]; ok {
		if n == nil {
			return nil, fail(syscall.ENOENT, "%v", f)
		}
		return n, nil
	}
	var kb fidKeyBuf // a key on the stack: a cache hit allocates nothing
	c, found, hit := t.s.cache.lookupInode(kb.key(pfxInode, f))
	switch {
	case hit && !found:
		return nil, fail(syscall.ENOENT, "%v", f)
	case hit && t.ro:
		return c, nil
	}
	n := new(inode)
	if hit {
		*n = *c // the tx's own copy, to change
	} else {
		v, err := t.s.get(fidKey(pfxInode, f))
		if errors.Is(err, pebble.ErrNotFound) {
			return nil, fail(syscall.ENOENT, "%v", f)
		}
		if err != nil {
			return nil, ioError(err, "read inode %v", f)
		}
		if *n, err = decodeInode(v); err != nil {
			return nil, ioError(err, "inode %v", f)
		}
	}
	if t.inodes == nil {
		t.inodes = make(map[fid.FID]*inode, 2)
	}
	t.inodes[f] = n
	return n, nil
}

// dir returns the directory f: ENOENT if it does not exist or was removed
// (an open orphan), ENOTDIR if it is not a directory.
func (t *tx) dir(f fid.FID) (*inode, error) {
	n, err := t.inode(f)
	if err != nil {
		return nil, err
	}
	if !isDir(n.Mode) {
		return nil, fail(syscall.ENOTDIR, "%v", f)
	}
	if n.Nlink == 0 {
		return nil, fail(syscall.ENOENT, "%v: removed directory", f)
	}
	return n, nil
}

func (t *tx) touch(n *inode) { t.dirty[n.FID] = true }

// lookup returns the entry name of parent; found is false if there is
// none.
func (t *tx) lookup(parent fid.FID, name string) (child fid.FID, typ DType, found bool, err error) {
	var kb [direntKeyMax]byte // on the stack: a cache hit allocates nothing
	v, found, hit := t.s.cache.view(appendDirentKey(kb[:0], parent, name))
	switch {
	case hit && !found:
		return fid.FID{}, 0, false, nil
	case !hit:
		// The name filter only after the cache: a name the cache holds
		// would pay for its probes for nothing.
		if t.s.names.absent(parent, name) {
			return fid.FID{}, 0, false, nil
		}
		if v, err = t.s.get(direntKey(parent, name)); errors.Is(err, pebble.ErrNotFound) {
			return fid.FID{}, 0, false, nil
		} else if err != nil {
			return fid.FID{}, 0, false, ioError(err, "lookup %q in %v", clampName(name), parent)
		}
	}
	child, typ, err = decodeDirent(v)
	if err != nil {
		return fid.FID{}, 0, false, ioError(err, "entry %q in %v", clampName(name), parent)
	}
	return child, typ, true, nil
}

// addEntry writes the entry name → child in parent and child's link EA.
func (t *tx) addEntry(parent fid.FID, name string, child *inode) {
	dt, _ := dtype(child.Mode)
	t.b.Set(direntKey(parent, name), marshalDirent(child.FID, dt), nil)
	t.b.Set(linkKey(child.FID, parent, name), nil, nil)
	t.added = append(t.added, dirName{parent, name})
}

func (t *tx) delEntry(parent fid.FID, name string, child fid.FID) {
	t.b.Delete(direntKey(parent, name), nil)
	t.b.Delete(linkKey(child, parent, name), nil)
}

// parentOf returns the parent of directory d from its link EA (RootFID for
// the root).
func (t *tx) parentOf(d fid.FID) (fid.FID, error) {
	if d == RootFID {
		return RootFID, nil
	}
	var p fid.FID
	found := false
	lo, hi := fidPrefix(pfxLink, d)
	err := t.s.scanRange(lo, hi, func(k, _ []byte) error {
		_, parent, _, ok := parseLinkKey(k)
		if !ok {
			return errors.New("bad link key")
		}
		p, found = parent, true
		return errStop
	})
	if err != nil {
		return fid.FID{}, ioError(err, "link EA of %v", d)
	}
	if !found {
		return fid.FID{}, fail(syscall.ENOENT, "%v has no parent", d)
	}
	return p, nil
}

func (s *Store) scanRange(lo, hi []byte, fn func(k, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
	return it.Error()
}

// changelog queues a record; commit numbers it, and drops it if no user
// is registered.
func (t *tx) changelog(rec ChangelogRecord) {
	if len(t.s.mu.clUsers) > 0 {
		t.cl = append(t.cl, rec)
	}
}

// layoutOf returns f's layout, nil if it has none.
func (t *tx) layoutOf(f fid.FID) (*layout.Layout, error) {
	v, err := t.s.get(fidKey(pfxLayout, f))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, ioError(err, "layout of %v", f)
	}
	l, err := layout.Unmarshal(v)
	if err != nil {
		return nil, ioError(err, "layout of %v", f)
	}
	return &l, nil
}

// release handles an inode whose link count dropped to zero: kept as an
// orphan while open, destroyed otherwise. It fills rm.
func (t *tx) release(n *inode, rm *Removal) error {
	rm.Last = true
	if t.s.mayBeOpenLocked(n.FID, 0) {
		rm.Orphan = true
		t.b.Set(fidKey(pfxOrphan, n.FID), nil, nil)
		t.touch(n)
		return nil
	}
	return t.destroy(n, rm)
}

// destroy deletes inode n and every record keyed by its FID, and queues a
// destroy log record for its OST objects.
func (t *tx) destroy(n *inode, rm *Removal) error {
	f := n.FID
	l, err := t.layoutOf(f)
	if err != nil {
		return err
	}
	rm.Destroyed, rm.Layout = true, l
	if l != nil && hasObjects(l) {
		t.destroys = append(t.destroys, DestroyRecord{FID: f, Layout: *l})
		rm.destroyIdx = len(t.destroys)
	}
	for _, p := range []byte{pfxInode, pfxLayout, pfxLSOM, pfxHSM, pfxOrphan} {
		t.b.Delete(fidKey(p, f), nil)
	}
	// Its link EAs went with its entries (delEntry deletes both, and an
	// inode is destroyed only when it has none left; Check finds any
	// left over), so only its extended attributes are searched for, if
	// it may have any (a search costs an iterator: a quarter of an
	// unlink of a file that has none).
	if n.mayHaveXattrs() {
		lo, hi := fidPrefix(pfxXattr, f)
		if err := t.s.scanRange(lo, hi, func(k, _ []byte) error {
			t.b.Delete(append([]byte(nil), k...), nil)
			return nil
		}); err != nil {
			return ioError(err, "destroy %v", f)
		}
	}
	t.inodes[f] = nil
	delete(t.dirty, f)
	t.inodeDelta--
	t.orphansOff = append(t.orphansOff, f)
	return nil
}

func hasObjects(l *layout.Layout) bool {
	for i := range l.Components {
		if l.Components[i].Instantiated() {
			return true
		}
	}
	return false
}

package client

import (
	"bytes"
	"context"
	"sync"

	"github.com/nacrefs/nacre/client/lov"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
)

// The client's metadata cache (Lustre's llite inode and dentry caches
// under MDC locks): an inode's attributes and layout are cached while the
// IBITS lock its getattr intent was granted is held, and a name's entry
// while the lock of the file it leads to is. A blocking AST on that lock
// (another client, or this one, changing the file, its name or its
// directory) drops both before the lock is given back and tells the
// Notifier. The cache is bounded by the locks: an inode is kept only while
// it has a lock or an open file, and the lock client's LRU bounds locks.
// Names a lookup found missing are kept (up to maxNegatives) while the
// lock on their directory that the MDT answered with is held.

// inode is what the client knows of one file.
type inode struct {
	fid   fid.FID
	attr  mdc.Attr
	valid bool // attr and lay hold under lock
	lock  *ldlm.ClientLock
	lay   *layout.Layout
	// data is the file's objects, opened on first use of a regular file's
	// data; it lives as long as the inode.
	data *lov.File
	dlay *layout.Layout // the layout data was opened with
	// retired are objects of layouts data replaced while the file was
	// open (handles may be using them): closed when the inode goes.
	retired []*lov.File
	// mtimeGen counts explicit mtime sets through this client (Setattr
	// with a time), so closes of writers do not overwrite them.
	mtimeGen uint64
	// stale: a lock covering the layout went while the file was open;
	// the next I/O reads the layout again. layoutGen counts such losses:
	// a read that began on objects the layout no longer has is done again
	// (their data may have been destroyed under it).
	stale     bool
	layoutGen uint64
	opens     int
	names     map[dentKey]struct{}
	// written says the file's data changed through this client since its
	// last close (its mtime goes to the MDT then).
	written bool
	// xattrs are extended attributes that everyone reads alike (see
	// sharedXattr), read while attr was valid under lock; they go
	// whenever attr stops being valid or the lock changes. xgen moves
	// then, so that a read that raced the change keeps nothing.
	xattrs map[string]xattrValue
	xgen   uint64
}

// xattrValue is a cached extended attribute: its value, or that it is
// absent.
type xattrValue struct {
	v      []byte
	absent bool
}

// Bounds of an inode's cached extended attributes.
const (
	maxCachedXattrs    = 8
	maxCachedXattrSize = 4096
)

// dropXattrsLocked forgets ino's cached extended attributes.
func (ino *inode) dropXattrsLocked() {
	ino.xattrs = nil
	ino.xgen++
}

type dentKey struct {
	parent fid.FID
	name   string
}

type cache struct {
	mu     sync.Mutex
	inodes map[fid.FID]*inode
	dents  map[dentKey]fid.FID
	byLock map[*ldlm.ClientLock]lockRef
	// negs are names a lookup found missing, valid while the client
	// holds the directory lock (with the UPDATE bit) the MDT answered
	// with, as Lustre's negative dentries are: a name made there by
	// anyone calls that lock back first. negByLock lists them by lock.
	// At most maxNegatives.
	negs      map[dentKey]*ldlm.ClientLock
	negByLock map[*ldlm.ClientLock]map[dentKey]struct{}
	// sets are directories' whole name sets by directory, setByLock the
	// directory of each set's lock, setNames their names in all; making
	// and makingNames count the O_CREAT opens in flight by directory and
	// by name, dirGens and nameGens are generations, and misses what is
	// known of directories without a set (names.go).
	sets        map[fid.FID]*nameSet
	setByLock   map[*ldlm.ClientLock]fid.FID
	setNames    int
	making      map[fid.FID]int
	makingNames map[dentKey]int
	dirGens     [genBuckets]uint64
	nameGens    [genBuckets]uint64
	misses      map[fid.FID]*dirMisses
	// reading are the locks under which a directory is being read for
	// a set, tainted those whose sets and missing names are not to be
	// believed (names.go).
	reading map[*ldlm.ClientLock]fid.FID
	tainted map[*ldlm.ClientLock]struct{}
}

// maxNegatives bounds the missing names the cache keeps.
const maxNegatives = 1 << 14

// lockRef is what a lock the cache knows covers: an inode's attributes
// (and entries), or only the layout of an open file (an open's lock).
type lockRef struct {
	fid        fid.FID
	layoutOnly bool
	// entry is the name an open's lock protects (its LOOKUP bit), if the
	// open was by name.
	entry dentKey
}

func (c *cache) init() {
	c.inodes = make(map[fid.FID]*inode)
	c.dents = make(map[dentKey]fid.FID)
	c.byLock = make(map[*ldlm.ClientLock]lockRef)
	c.negs = make(map[dentKey]*ldlm.ClientLock)
	c.negByLock = make(map[*ldlm.ClientLock]map[dentKey]struct{})
	c.sets = make(map[fid.FID]*nameSet)
	c.setByLock = make(map[*ldlm.ClientLock]fid.FID)
	c.making = make(map[fid.FID]int)
	c.makingNames = make(map[dentKey]int)
	c.misses = make(map[fid.FID]*dirMisses)
	c.reading = make(map[*ldlm.ClientLock]fid.FID)
	c.tainted = make(map[*ldlm.ClientLock]struct{})
}

// storeNegative records that name is not in parent while l, a lock on
// parent with the UPDATE bit that the lookup's reference keeps from going
// meanwhile, is held — unless one of this client's creates of the name
// ran since the lookup began (the name's generation moved from gen: the
// create may have left the lock alone).
func (c *cache) storeNegative(parent fid.FID, name string, l *ldlm.ClientLock, gen uint64) {
	if !updateLockOn(l, parent) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := dentKey{parent, name}
	if _, bad := c.tainted[l]; bad || l.Gone() || *c.nameGenLocked(k) != gen || c.makingNames[k] > 0 {
		return
	}
	c.addNegativeLocked(k, l)
}

// updateLockOn reports whether l is a lock on dir with the UPDATE bit,
// under which dir's names (and missing names) may be cached.
func updateLockOn(l *ldlm.ClientLock, dir fid.FID) bool {
	return l != nil && l.Resource.ID == ldlm.ResIDOfFID(dir.Seq, dir.Oid, dir.Ver) && l.Policy().Bits&ldlm.BitUpdate != 0
}

// addNegativeLocked files k as missing under l.
func (c *cache) addNegativeLocked(k dentKey, l *ldlm.ClientLock) {
	if _, ok := c.negs[k]; ok || len(c.negs) >= maxNegatives {
		return
	}
	c.negs[k] = l
	ks := c.negByLock[l]
	if ks == nil {
		ks = make(map[dentKey]struct{})
		c.negByLock[l] = ks
	}
	ks[k] = struct{}{}
}

// dropNegativeLocked forgets that k is missing.
func (c *cache) dropNegativeLocked(k dentKey) {
	l, ok := c.negs[k]
	if !ok {
		return
	}
	delete(c.negs, k)
	delete(c.negByLock[l], k)
}

// negative reports whether name is known missing from parent.
func (c *cache) negative(parent fid.FID, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.negs[dentKey{parent, name}]
	return ok
}

// takeNegative forgets that name is missing from parent (the client is
// making it) and reports whether it was known missing.
func (c *cache) takeNegative(parent fid.FID, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := dentKey{parent, name}
	if _, ok := c.negs[k]; !ok {
		return false
	}
	c.dropNegativeLocked(k)
	return true
}

// dropNegativesLocked forgets the missing names l kept valid and returns
// them, for the Notifier.
func (c *cache) dropNegativesLocked(l *ldlm.ClientLock) []dentKey {
	ks := c.negByLock[l]
	if ks == nil {
		return nil
	}
	delete(c.negByLock, l)
	out := make([]dentKey, 0, len(ks))
	for k := range ks {
		delete(c.negs, k)
		out = append(out, k)
	}
	return out
}

// invalidateEntries tells the Notifier that names are gone from the cache.
func invalidateEntries(fs *FS, names []dentKey) {
	if n := fs.cfg.Notify; n != nil {
		for _, k := range names {
			n.InvalidateEntry(k.parent, k.name)
		}
	}
}

// closeData closes an inode's objects; the caller has taken it out of the
// table.
func (ino *inode) closeData() {
	if ino.data != nil {
		ino.data.Close()
	}
	for _, d := range ino.retired {
		d.Close()
	}
	ino.data, ino.retired = nil, nil
}

// openLock records the lock an open was granted (or one a layout was read
// again under): its callback marks the open file's layout stale and, if the open was by name (entry), drops
// the entry, which the lock's LOOKUP bit kept valid: the cache knows the
// name leads to f until then. It reports whether it keeps the entry so.
func (c *cache) openLock(f fid.FID, l *ldlm.ClientLock, entry dentKey) bool {
	if l.Policy().Bits&ldlm.BitLookup == 0 { // (the lock's own mutex, before the cache's)
		entry = dentKey{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byLock[l]; ok {
		return false
	}
	if l.Gone() {
		// Called back already: the layout it came with may be old.
		if ino := c.inodes[f]; ino != nil && ino.opens > 0 {
			ino.staleLocked()
		}
		return false
	}
	c.byLock[l] = lockRef{fid: f, layoutOnly: true, entry: entry}
	if entry.name == "" {
		return false
	}
	c.dents[entry] = f
	return true
}

// staleLocked has the next I/O read the layout again and the reads under
// way on the present one do theirs again. The cache's mutex is held.
func (ino *inode) staleLocked() {
	ino.stale = true
	ino.layoutGen++
}

// getLocked returns f's inode, making an empty one.
func (c *cache) getLocked(f fid.FID) *inode {
	ino := c.inodes[f]
	if ino == nil {
		ino = &inode{fid: f}
		c.inodes[f] = ino
	}
	return ino
}

// attr returns f's cached attributes and layout, if valid.
func (c *cache) attr(f fid.FID) (mdc.Attr, *layout.Layout, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ino := c.inodes[f]; ino != nil && ino.valid {
		return ino.attr, ino.lay, true
	}
	return mdc.Attr{}, nil, false
}

// permAttr returns f's cached attributes if a lock with the PERM bit
// still covers them, valid or not: a change in a directory calls back its
// locks' UPDATE bit (the size, times and link count go stale) but keeps
// PERM, which a change of the mode or the owner calls back.
func (c *cache) permAttr(f fid.FID) (mdc.Attr, bool) {
	c.mu.Lock()
	ino := c.inodes[f]
	if ino == nil || ino.lock == nil {
		c.mu.Unlock()
		return mdc.Attr{}, false
	}
	a, l := ino.attr, ino.lock
	c.mu.Unlock()
	// (The lock's bits outside the cache's mutex: ldlm runs the hooks,
	// which take it, without its own.)
	if l.Gone() || l.Policy().Bits&ldlm.BitPerm == 0 {
		return mdc.Attr{}, false
	}
	return a, true
}

// lookup returns the FID name in parent leads to, if cached.
func (c *cache) lookup(parent fid.FID, name string) (fid.FID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.dents[dentKey{parent, name}]
	return f, ok
}

// store records what an intent returned: attributes (and layout) valid
// under l, and, when name is not empty, the entry name in parent. l may be
// nil (nothing is cached then, only the attributes of an open inode
// refreshed).
//
// It returns the lock the attributes were cached under before, if l
// replaced it and nothing else is cached under it: l may cover all it did
// (ldlm.Client.Retire).
func (c *cache) store(a mdc.Attr, lay *layout.Layout, l *ldlm.ClientLock, parent fid.FID, name string) (replaced *ldlm.ClientLock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l == nil || l.Gone() { // (gone: dropped by an eviction meanwhile, its hook has run)
		if ino := c.inodes[a.FID]; ino != nil {
			ino.attr = a
			if lay != nil {
				ino.lay = lay
			}
		}
		return nil
	}
	ino := c.getLocked(a.FID)
	if prev := ino.lock; prev != nil && prev != l {
		delete(c.byLock, prev)
		if c.untiedLocked(prev) {
			replaced = prev
		}
	}
	if !ino.valid || ino.lock != l {
		ino.dropXattrsLocked() // a new period of validity
	}
	ino.attr, ino.valid, ino.lock = a, true, l
	if lay != nil || a.Mode&0o170000 != 0o100000 {
		ino.lay = lay
	}
	c.byLock[l] = lockRef{fid: a.FID}
	if name != "" {
		k := dentKey{parent, name}
		c.dents[k] = a.FID
		if ino.names == nil {
			ino.names = make(map[dentKey]struct{})
		}
		ino.names[k] = struct{}{}
	}
	return replaced
}

// untiedLocked reports whether nothing is cached under l: no attributes,
// missing names, name set, or directory read in progress.
func (c *cache) untiedLocked(l *ldlm.ClientLock) bool {
	_, attrs := c.byLock[l]
	_, negs := c.negByLock[l]
	_, set := c.setByLock[l]
	_, reading := c.reading[l]
	return !attrs && !negs && !set && !reading
}

// forgetEntry drops a cached name (the client itself changes it) and
// returns the FID it led to, if it was cached.
func (c *cache) forgetEntry(parent fid.FID, name string) (fid.FID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := dentKey{parent, name}
	f, ok := c.dents[k]
	if ok {
		delete(c.dents, k)
		if ino := c.inodes[f]; ino != nil {
			delete(ino.names, k)
		}
	}
	return f, ok
}

// invalidate drops f's cached attributes (the client itself changed them).
func (c *cache) invalidate(f fid.FID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ino := c.inodes[f]; ino != nil {
		ino.valid = false
		ino.dropXattrsLocked()
	}
}

// cachedXattr returns f's extended attribute name as cached, if it is.
func (c *cache) cachedXattr(f fid.FID, name string) (x xattrValue, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ino := c.inodes[f]
	if ino == nil || !ino.valid || ino.lock == nil || ino.lock.Gone() {
		return xattrValue{}, false
	}
	if x, ok := ino.xattrs[name]; ok {
		return x, true
	}
	if ino.attr.NoXattrs {
		return xattrValue{absent: true}, true // (as valid as the attributes)
	}
	return xattrValue{}, false
}

// xattrGen returns the lock and generation under which a read of f's
// extended attributes may be kept (storeXattr); l nil if it may not.
func (c *cache) xattrGen(f fid.FID) (l *ldlm.ClientLock, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ino := c.inodes[f]; ino != nil && ino.valid {
		return ino.lock, ino.xgen
	}
	return nil, 0
}

// storeXattr keeps what a read of f's extended attribute name found, if
// f's attributes are still valid under l and nothing changed them since
// xattrGen gave gen.
func (c *cache) storeXattr(f fid.FID, name string, x xattrValue, l *ldlm.ClientLock, gen uint64) {
	if l == nil || len(x.v) > maxCachedXattrSize {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ino := c.inodes[f]
	if ino == nil || !ino.valid || ino.lock != l || ino.xgen != gen || l.Gone() {
		return
	}
	if ino.xattrs == nil {
		ino.xattrs = make(map[string]xattrValue)
	}
	if _, there := ino.xattrs[name]; !there && len(ino.xattrs) >= maxCachedXattrs {
		// Full (anyone can ask for names that are not there): one goes,
		// so that the names everyone reads keep their place.
		for k := range ino.xattrs {
			delete(ino.xattrs, k)
			break
		}
	}
	x.v = bytes.Clone(x.v)
	ino.xattrs[name] = x
}

// lockGone is every MDC lock's blocking hook: what was cached under l
// goes, and the Notifier hears of it.
func (c *cache) lockGone(fs *FS, l *ldlm.ClientLock) {
	c.mu.Lock()
	c.forgetLockLocked(l)
	defer invalidateEntries(fs, c.dropNegativesLocked(l)) // (after the unlock)
	ref, ok := c.byLock[l]
	if !ok {
		c.mu.Unlock()
		return
	}
	delete(c.byLock, l)
	f := ref.fid
	ino := c.inodes[f]
	if ino != nil && ino.opens > 0 {
		ino.staleLocked()
	}
	if ref.layoutOnly {
		var entry dentKey
		if ref.entry.name != "" && c.dents[ref.entry] == f {
			entry = ref.entry
			delete(c.dents, entry)
			if ino != nil {
				delete(ino.names, entry)
			}
		}
		c.mu.Unlock()
		if n := fs.cfg.Notify; n != nil && entry.name != "" {
			n.InvalidateEntry(entry.parent, entry.name)
		}
		return
	}
	var names []dentKey
	var gone *inode
	if ino != nil && ino.lock == l {
		ino.valid, ino.lock = false, nil
		ino.dropXattrsLocked()
		for k := range ino.names {
			names = append(names, k)
			delete(c.dents, k)
		}
		ino.names = nil
		if ino.opens == 0 {
			gone = ino
			delete(c.inodes, f)
		}
	}
	c.mu.Unlock()
	if gone != nil {
		gone.closeData()
	}
	if n := fs.cfg.Notify; n != nil {
		n.InvalidateAttr(f)
		for _, k := range names {
			n.InvalidateEntry(k.parent, k.name)
		}
	}
}

// lockConverted is every MDC lock's convert hook: the lock keeps its
// LOOKUP bit (the names cached under it stay) and gives back the bits a
// change conflicts with (UPDATE, LAYOUT: a create in a directory, a
// setattr): the attributes and layout cached under it go, and the
// Notifier hears of the attributes only.
func (c *cache) lockConverted(fs *FS, l *ldlm.ClientLock, dropped ldlm.Bits) bool {
	c.mu.Lock()
	if dropped&ldlm.BitUpdate != 0 { // a name may be made in the directory now
		c.forgetLockLocked(l)
		defer invalidateEntries(fs, c.dropNegativesLocked(l))
	}
	ref, ok := c.byLock[l]
	if !ok {
		c.mu.Unlock()
		return true // nothing cached under it
	}
	f := ref.fid
	ino := c.inodes[f]
	if ino != nil && ino.opens > 0 && dropped&ldlm.BitLayout != 0 {
		ino.staleLocked()
	}
	if !ref.layoutOnly && ino != nil && ino.lock == l {
		ino.valid = false
		ino.dropXattrsLocked()
	}
	c.mu.Unlock()
	if n := fs.cfg.Notify; n != nil && !ref.layoutOnly {
		n.InvalidateAttr(f)
	}
	return true
}

// dropAll forgets everything (eviction by the MDT, unmount).
func (c *cache) dropAll(fs *FS) {
	c.mu.Lock()
	var gone []*inode
	var stale []fid.FID
	for f, ino := range c.inodes {
		ino.valid, ino.lock, ino.names = false, nil, nil
		ino.dropXattrsLocked()
		stale = append(stale, f)
		if ino.opens == 0 {
			gone = append(gone, ino)
			delete(c.inodes, f)
		} else {
			ino.staleLocked()
		}
	}
	clear(c.dents)
	clear(c.byLock)
	negs := make([]dentKey, 0, len(c.negs))
	for k := range c.negs {
		negs = append(negs, k)
	}
	clear(c.negs)
	clear(c.negByLock)
	clear(c.sets)
	clear(c.setByLock)
	clear(c.reading)
	clear(c.tainted)
	c.setNames = 0
	c.mu.Unlock()
	if fs.ctx.Err() == nil {
		defer invalidateEntries(fs, negs)
	}
	for _, ino := range gone {
		ino.closeData()
	}
	if n := fs.cfg.Notify; n != nil && fs.ctx.Err() == nil {
		for _, f := range stale {
			n.InvalidateAttr(f)
		}
	}
}

// testInConvert, set by tests, runs first in every MDC lock's Convert hook.
var testInConvert func(l *ldlm.ClientLock)

// hooks are the hooks of every MDC lock the client takes.
func (fs *FS) hooks() ldlm.Hooks {
	return ldlm.Hooks{
		Blocking: func(_ context.Context, l *ldlm.ClientLock, _ bool) { fs.cache.lockGone(fs, l) },
		Convert: func(_ context.Context, l *ldlm.ClientLock, dropped ldlm.Bits) bool {
			if testInConvert != nil {
				testInConvert(l)
			}
			return fs.cache.lockConverted(fs, l, dropped)
		},
	}
}

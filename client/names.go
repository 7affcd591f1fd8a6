package client

import (
	"context"
	"errors"
	"syscall"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/ldlm"
)

// Name sets: every name in a directory, known while the client holds the
// PR UPDATE lock a negative lookup there was granted. A lookup of a name
// the set lacks is answered without an RPC. Negative entries (cache.negs)
// only know the names looked up before; a program making new files — an
// mdtest, a tar, a compiler's outputs — looks up each new name once, right
// before making it, and paid a lookup RPC per file.
//
// The set is read (READDIR) under the lock once a few lookups there have
// found nothing (under any lock: a create gives the lock back unless a
// set keeps it). It stays right as long as the lock is held: a name
// another client makes or removes there calls the lock back first, and a
// name this client makes with an O_CREAT open is added by the client
// itself, the MDT's create leaving the client's PR locks on the directory
// alone (mdc.Intent.KeepDirLocks, ldlm.Request.Tolerate). This client's
// other changes there (unlink, rename, mkdir, link, ...) call the lock back
// as anyone's do, and the set goes with it.

const (
	// setAfter is how many names looked up in vain in a directory make
	// the client read the whole directory.
	setAfter = 2
	// maxMissDirs bounds the directories whose misses are counted.
	maxMissDirs = 1 << 12
	// tooLarge, as a directory's miss count, says it had more than
	// maxDirNames names when last read.
	tooLarge = -1
	// maxDirNames is the most names a set holds: a larger directory gets
	// none (it is not read again under the same lock).
	maxDirNames = 1 << 13
	// maxSetNames bounds the names of all sets together.
	maxSetNames = 1 << 16
)

// nameSet is a directory's names under lock.
type nameSet struct {
	lock  *ldlm.ClientLock
	names map[string]struct{}
}

// missingName reports whether parent's set says name is not there, and
// the lock that keeps the set.
func (c *cache) missingName(parent fid.FID, name string) (*ldlm.ClientLock, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[parent]
	if s == nil || s.lock.Gone() {
		return nil, false
	}
	if _, ok := s.names[name]; ok {
		return nil, false
	}
	return s.lock, true
}

// wantSet counts a name looked up in vain in parent under l, the lock the
// lookup was granted, and reports whether parent's names should be read
// under l now: enough names were missing there, parent has no set under l
// and was not found too large, and the sets have room.
func (c *cache) wantSet(parent fid.FID, l *ldlm.ClientLock) (gen uint64, ok bool) {
	if l.Policy().Bits&ldlm.BitUpdate == 0 || l.Resource.ID != ldlm.ResIDOfFID(parent.Seq, parent.Oid, parent.Ver) {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sets[parent]; s != nil && s.lock == l {
		return 0, false
	}
	n, ok := c.misses[parent]
	if n == tooLarge {
		return 0, false
	}
	if !ok && len(c.misses) >= maxMissDirs {
		clear(c.misses)
	}
	n++
	c.misses[parent] = n
	if n < setAfter || c.making[parent] > 0 || c.setNames >= maxSetNames || l.Gone() {
		return 0, false
	}
	return c.made, true
}

// installSet files names as parent's set under l, unless l went, this
// client made a name meanwhile (gen, from wantSet, moved), or the sets are
// full; names nil marks parent too large.
func (c *cache) installSet(parent fid.FID, l *ldlm.ClientLock, names map[string]struct{}, gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if names == nil {
		c.misses[parent] = tooLarge
		return false
	}
	if l.Gone() || c.made != gen || c.making[parent] > 0 || c.setNames+len(names) > maxSetNames {
		return false
	}
	if old := c.sets[parent]; old != nil {
		c.dropSetLocked(old.lock)
	}
	c.dropSetLocked(l) // (a lock covers one directory)
	c.sets[parent] = &nameSet{lock: l, names: names}
	c.setByLock[l] = parent
	c.setNames += len(names)
	return true
}

// dropSetLocked forgets the set l kept.
func (c *cache) dropSetLocked(l *ldlm.ClientLock) {
	f, ok := c.setByLock[l]
	if !ok {
		return
	}
	delete(c.setByLock, l)
	if s := c.sets[f]; s != nil && s.lock == l {
		c.setNames -= len(s.names)
		delete(c.sets, f)
	}
}

// beginMaking is called before an O_CREAT open of a name in parent and
// reports whether parent has a set, which the create then keeps (it asks
// the MDT to leave the lock alone); endMaking must follow.
func (c *cache) beginMaking(parent fid.FID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sets[parent]
	if s == nil || s.lock.Gone() {
		return false
	}
	c.making[parent]++
	return true
}

// endMaking ends a create beginMaking kept the set for: a name made goes
// into the set, and the directory's cached times become the new file's
// ctime (the MDT's, which the create set on both); a create that failed in
// a way that may have changed the directory, or that found a name the set
// did not have, drops the set.
func (c *cache) endMaking(parent fid.FID, name string, a *mdc.Attr, created bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.making[parent]--; c.making[parent] <= 0 {
		delete(c.making, parent)
	}
	c.made++
	s := c.sets[parent]
	if s == nil {
		return
	}
	_, known := s.names[name]
	switch {
	case err != nil && (known && errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)):
		// Nothing was made.
	case err != nil, !created && !known, len(s.names) >= maxDirNames:
		c.dropSetLocked(s.lock)
	case created:
		s.names[name] = struct{}{}
		c.setNames++
		if ino := c.inodes[parent]; ino != nil && ino.valid && a != nil && a.Ctime > ino.attr.Ctime {
			ino.attr.Mtime, ino.attr.Ctime = a.Ctime, a.Ctime
		}
	}
}

// readNames reads parent's names under l for its set, if wantSet says so;
// the caller holds a reference on l, so that it cannot be given back
// meanwhile (a blocking AST waits for the read).
func (fs *FS) readNames(ctx context.Context, cred Cred, parent FID, l *ldlm.ClientLock) {
	gen, ok := fs.cache.wantSet(parent, l)
	if !ok {
		return
	}
	names := make(map[string]struct{})
	for e, err := range fs.mdc.Readdir(ctx, cred, parent) {
		if err != nil {
			fs.log.Debug("client: reading names", "dir", parent, "err", err)
			return
		}
		if e.Name == "." || e.Name == ".." {
			continue
		}
		if len(names) == maxDirNames {
			fs.cache.installSet(parent, l, nil, gen)
			return
		}
		names[e.Name] = struct{}{}
	}
	fs.cache.installSet(parent, l, names, gen)
}

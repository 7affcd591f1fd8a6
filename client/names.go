package client

import (
	"context"
	"errors"
	"hash/maphash"
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
// The set is read (READDIR) under the lock once a few lookups in the
// directory have found nothing (under any lock: a create gives the lock
// back unless a set keeps it). It stays right as long as the lock is held:
// a name another client makes or removes there calls the lock back first,
// and a name this client makes with an O_CREAT open is added by the client
// itself — the create asks the MDT to leave the set's lock alone
// (mdc.Intent.KeepDirLock, ldlm.Request.Tolerate). It holds no reference
// on it: two clients making names in one directory would each wait, in
// the MDT, for the other's lock. This client's other changes there
// (unlink, rename, mkdir, link, ...) give the lock back with their request,
// and the set goes with it.
//
// A name the client stores as missing while one of its own creates of
// that name runs could be the name made: lookups note the name's
// generation (nameGens, moved by every such create) before they look, and
// store nothing if it moved; a set is installed only if no create ran in
// the directory meanwhile (dirGens).

const (
	// setAfter is how many names looked up in vain in a directory make
	// the client read the whole directory; each set the directory loses
	// to another client's change doubles it there, up to maxSetAfter.
	setAfter    = 2
	maxSetAfter = 1 << 10
	// maxMissDirs bounds the directories whose misses are counted.
	maxMissDirs = 1 << 12
	// maxDirNames is the most names a set holds: a larger directory gets
	// none (until the count of its misses is forgotten). Some 4-8 MiB of
	// names; reading them is 64 READDIR pages, once per lock.
	maxDirNames = 1 << 16
	// maxSetNames bounds the names of all sets together.
	maxSetNames = 1 << 18
	// genBuckets is how many generation counters the directories share.
	genBuckets = 64
)

// nameSet is a directory's names under lock.
type nameSet struct {
	lock  *ldlm.ClientLock
	names map[string]struct{}
}

// dirMisses is what the client knows of a directory without a set.
type dirMisses struct {
	n, need int
	noSet   bool // too large, or unreadable: no set until forgotten
}

var genSeed = maphash.MakeSeed()

// genBucket hashes a directory, and a name in it if not "", to one of the
// generation counters.
func genBucket(dir fid.FID, name string) uint64 {
	var h maphash.Hash
	h.SetSeed(genSeed)
	var b [fid.Size]byte
	dir.Put(b[:])
	h.Write(b[:])
	h.WriteString(name)
	return h.Sum64() % genBuckets
}

// dirGenLocked and nameGenLocked return the generation counters of a
// directory and of a name in it.
func (c *cache) dirGenLocked(dir fid.FID) *uint64 { return &c.dirGens[genBucket(dir, "")] }

func (c *cache) nameGenLocked(k dentKey) *uint64 { return &c.nameGens[genBucket(k.parent, k.name)] }

// nameGen returns the generation of name in dir, for storeNegative.
func (c *cache) nameGen(dir fid.FID, name string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *c.nameGenLocked(dentKey{dir, name})
}

// answerFromSet reports whether parent's set says name is not there and,
// if so, records name as missing under the set's lock — in one critical
// section, so that a callback of the lock, whose hook drops the set and
// the lock's negative entries under the same mutex, cannot come between.
// It returns the lock, for Touch.
func (c *cache) answerFromSet(parent fid.FID, name string) (*ldlm.ClientLock, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := dentKey{parent, name}
	s := c.sets[parent]
	if s == nil || s.lock.Gone() || c.makingNames[k] > 0 {
		return nil, false
	}
	if _, ok := s.names[name]; ok {
		return nil, false
	}
	c.addNegativeLocked(k, s.lock)
	return s.lock, true
}

// wantSet counts a name looked up in vain in parent under l, the lock the
// lookup was granted, and reports whether parent's names should be read
// under l now: enough names were missing there, parent has no set under l
// and none was refused it, and the sets have room. If so it notes that
// parent is being read under l (reading), which l's hooks undo: the caller
// holds a reference on l, so no hook can have run yet, and may let it go
// before it reads — a READDIR under a held lock kept the lock from another
// client's change, and waited for a request slot that lookups parked
// behind that change held. gen is parent's generation, for installSet.
func (c *cache) wantSet(parent fid.FID, l *ldlm.ClientLock) (gen uint64, ok bool) {
	if !updateLockOn(l, parent) {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sets[parent]; s != nil && s.lock == l {
		return 0, false
	}
	if _, ok := c.tainted[l]; ok {
		return 0, false
	}
	if _, ok := c.reading[l]; ok {
		return 0, false // another lookup reads it
	}
	m, ok := c.misses[parent]
	if !ok {
		if len(c.misses) >= maxMissDirs {
			clear(c.misses)
		}
		m = &dirMisses{need: setAfter}
		c.misses[parent] = m
	}
	m.n++
	if m.noSet || m.n < m.need || c.making[parent] > 0 || c.setNames >= maxSetNames || l.Gone() {
		return 0, false
	}
	c.reading[l] = parent
	return *c.dirGenLocked(parent), true
}

// installSet files names as parent's set under l, unless l was called
// back or converted since wantSet, one of this client's creates ran there
// meanwhile (gen moved), or the sets are full; names nil only ends the
// reading.
func (c *cache) installSet(parent fid.FID, l *ldlm.ClientLock, names map[string]struct{}, gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.reading[l]; !ok || p != parent {
		return false // l was called back or converted meanwhile
	}
	delete(c.reading, l)
	if names == nil || l.Gone() || *c.dirGenLocked(parent) != gen || c.making[parent] > 0 || c.setNames+len(names) > maxSetNames {
		return false
	}
	if old := c.sets[parent]; old != nil {
		c.dropSetLocked(old.lock, false)
	}
	c.dropSetLocked(l, false) // (a lock covers one directory)
	c.sets[parent] = &nameSet{lock: l, names: names}
	c.setByLock[l] = parent
	c.setNames += len(names)
	if m := c.misses[parent]; m != nil {
		m.n = 0
	}
	return true
}

// refuseSet marks parent as getting no set (too large, unreadable) until
// the count of its misses is forgotten.
func (c *cache) refuseSet(parent fid.FID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.misses[parent]; m != nil {
		m.noSet = true
	}
}

// taintLocked marks l tainted. The lock may have left already (its hook,
// which forgets the mark, ran before the create returned): the marks of
// locks gone are swept, so that only live locks keep one.
func (c *cache) taintLocked(l *ldlm.ClientLock) {
	for t := range c.tainted {
		if t.Gone() {
			delete(c.tainted, t)
		}
	}
	c.tainted[l] = struct{}{}
}

// forgetLockLocked forgets what the sets know of l, which was called back,
// converted without its UPDATE bit, or dropped.
func (c *cache) forgetLockLocked(l *ldlm.ClientLock) {
	c.dropSetLocked(l, true)
	delete(c.reading, l)
	delete(c.tainted, l)
}

// dropSetLocked forgets the set l kept; lost says the lock was called back
// or converted, which makes parent wait for more misses before it is read
// again (a directory others change often is not read at every miss).
func (c *cache) dropSetLocked(l *ldlm.ClientLock, lost bool) {
	f, ok := c.setByLock[l]
	if !ok {
		return
	}
	delete(c.setByLock, l)
	if s := c.sets[f]; s != nil && s.lock == l {
		c.setNames -= len(s.names)
		delete(c.sets, f)
	}
	if m := c.misses[f]; lost && m != nil {
		m.n, m.need = 0, min(2*m.need, maxSetAfter)
	}
}

// making is an O_CREAT open in flight (beginMaking).
type making struct {
	k    dentKey
	lock *ldlm.ClientLock // the set's lock, which the create keeps; nil if none
}

// beginMaking is called before an O_CREAT open of name in parent: it
// moves the generations of parent and of the name and returns, if parent
// has a set, its lock, for the create to keep. endMaking must follow.
func (c *cache) beginMaking(parent fid.FID, name string) making {
	k := dentKey{parent, name}
	c.mu.Lock()
	*c.dirGenLocked(parent)++
	*c.nameGenLocked(k)++
	c.making[parent]++
	c.makingNames[k]++
	var l *ldlm.ClientLock
	if s := c.sets[parent]; s != nil && !s.lock.Gone() {
		l = s.lock
	}
	c.mu.Unlock()
	return making{k: k, lock: l}
}

// endMaking ends a create begun by beginMaking, whose outcome is err and,
// without one, the new file's attributes a and whether it was
// made (created). The name is no longer known missing anywhere. With the
// set's lock kept, the name joins the set and the directory's cached
// times become the new file's ctime (the MDT set both so); a create that
// failed in a way that may have changed the directory, or that found a
// name the set lacked, gives the lock back, set and cached attributes
// with it.
func (fs *FS) endMaking(ctx context.Context, mk making, a *mdc.Attr, created bool, err error) {
	c := &fs.cache
	k := mk.k
	parent, name := k.parent, k.name
	c.mu.Lock()
	if c.making[parent]--; c.making[parent] <= 0 {
		delete(c.making, parent)
	}
	if c.makingNames[k]--; c.makingNames[k] <= 0 {
		delete(c.makingNames, k)
	}
	*c.dirGenLocked(parent)++
	*c.nameGenLocked(k)++
	_, wasMissing := c.negs[k]
	c.dropNegativeLocked(k)
	var stale []dentKey
	giveBack := false
	if mk.lock != nil {
		s := c.sets[parent]
		if s != nil && s.lock != mk.lock {
			s = nil
		}
		known := false
		if s != nil {
			_, known = s.names[name]
		}
		switch {
		case err != nil && known && errors.Is(err, syscall.EEXIST):
			// Nothing was made: the name was there, as the set said.
		case err != nil, !created && !known:
			// The MDT may have made the name, or will yet, leaving the
			// lock alone (an error after the create, an interrupted or
			// resent request), or the set lacked a name that exists:
			// nothing the lock keeps is to be believed any more, and it
			// is never used for a set or a missing name again.
			c.dropSetLocked(mk.lock, false)
			stale = c.dropNegativesLocked(mk.lock)
			c.taintLocked(mk.lock)
			giveBack = true
		case created:
			if s != nil && !known && len(s.names) < maxDirNames && c.setNames < maxSetNames {
				s.names[name] = struct{}{}
				c.setNames++
			} else if s != nil && !known {
				c.dropSetLocked(mk.lock, false)
			}
			if ino := c.inodes[parent]; ino != nil && ino.valid && ino.lock == mk.lock && a != nil && a.Ctime > ino.attr.Ctime {
				ino.attr.Mtime, ino.attr.Ctime = a.Ctime, a.Ctime
			}
		}
	}
	c.mu.Unlock()
	if wasMissing && err == nil {
		stale = append(stale, k)
	}
	invalidateEntries(fs, stale)
	if giveBack {
		// And it goes now unless it is in use (its hooks drop what the
		// attributes cached under it).
		fs.mdc.GiveBackBits(ctx, parent, ldlm.BitUpdate)
	}
}

// readNames releases the caller's reference on l, a lock a negative lookup
// in parent was granted, and then reads parent's names for a set under l
// if wantSet says so.
func (fs *FS) readNames(ctx context.Context, cred Cred, parent FID, l *ldlm.ClientLock) {
	gen, ok := fs.cache.wantSet(parent, l)
	l.Release()
	if !ok {
		return
	}
	if testBeforeReadNames != nil {
		testBeforeReadNames()
	}
	names := make(map[string]struct{})
	for e, err := range fs.mdc.Readdir(ctx, cred, parent) {
		if err != nil {
			fs.log.Debug("client: reading names", "dir", parent, "err", err)
			if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
				fs.cache.refuseSet(parent)
			}
			fs.cache.installSet(parent, l, nil, gen)
			return
		}
		if e.Name == "." || e.Name == ".." {
			continue
		}
		if len(names) == maxDirNames {
			fs.cache.refuseSet(parent)
			fs.cache.installSet(parent, l, nil, gen)
			return
		}
		names[e.Name] = struct{}{}
	}
	fs.cache.installSet(parent, l, names, gen)
}

// testBeforeReadNames, set by tests, runs before readNames reads.
var testBeforeReadNames func()

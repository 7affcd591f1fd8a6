package mdd

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// valueCache keeps the records the read path gets most — inodes,
// directory entries, LSOM and layouts, and their absence — in memory, so
// that a lookup or getattr costs map lookups instead of Pebble gets (the
// MDT's answer to ldiskfs's inode and dentry caches).
//
// Coherence: only tx.commit writes these records, with the store's write
// lock held; after the batch is applied it bumps gen and puts every
// record the batch wrote (or deleted) into the cache. A read that misses
// notes gen, gets from Pebble and fills the cache only if gen has not
// moved meanwhile, so a value read before a commit can never overwrite
// what the commit put. Bounded: a shard that fills up is emptied.
type valueCache struct {
	gen    atomic.Uint64
	seed   maphash.Seed
	max    int // entries per shard
	shards [cacheShards]cacheShard
}

const cacheShards = 64

type cacheShard struct {
	sync.Mutex
	m map[string]cacheEntry
}

// cacheEntry is a cached record; found is false for a record known not
// to exist.
type cacheEntry struct {
	v     []byte
	found bool
	// ino is v decoded, for an inode record once read as one
	// (lookupInode): shared by the readers, never changed.
	ino *inode
}

func newValueCache(entries int) *valueCache {
	c := &valueCache{seed: maphash.MakeSeed(), max: max(entries/cacheShards, 16)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]cacheEntry)
	}
	return c
}

// cachedKey reports whether records under key's prefix are cached.
func cachedKey(key []byte) bool {
	if len(key) == 0 {
		return false
	}
	switch key[0] {
	case pfxInode, pfxDirent, pfxLSOM, pfxLayout:
		return true
	}
	return false
}

func (c *valueCache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, key)%cacheShards]
}

// lookup returns a copy of the cached record: hit says whether the cache
// knows the key, found whether the record exists.
func (c *valueCache) lookup(key []byte) (v []byte, found, hit bool) {
	if v, found, hit = c.view(key); found {
		v = append([]byte(nil), v...)
	}
	return v, found, hit
}

// view is lookup without the copy: v is the cache's, never changed in
// place (a commit replaces it), and must not be changed by the caller.
func (c *valueCache) view(key []byte) (v []byte, found, hit bool) {
	sh := c.shard(key)
	sh.Lock()
	e, ok := sh.m[string(key)]
	sh.Unlock()
	return e.v, e.found, ok
}

// lookupInode is lookup for an inode record, decoded: the inode is the
// cache's, shared, and must not be changed (copy it). A record that does
// not decode is a miss, for the caller to read and report.
func (c *valueCache) lookupInode(key []byte) (n *inode, found, hit bool) {
	sh := c.shard(key)
	sh.Lock()
	e, ok := sh.m[string(key)]
	sh.Unlock()
	switch {
	case !ok:
		return nil, false, false
	case !e.found:
		return nil, false, true
	case e.ino != nil:
		return e.ino, true, true
	}
	d, err := decodeInode(e.v)
	if err != nil {
		return nil, false, false
	}
	n = &d
	sh.Lock()
	// Unless a commit replaced the record meanwhile: values are copies,
	// never changed in place, so the same array is the same record.
	if cur, ok := sh.m[string(key)]; ok && cur.found && cur.ino == nil && len(cur.v) > 0 && &cur.v[0] == &e.v[0] {
		cur.ino = n
		sh.m[string(key)] = cur
	}
	sh.Unlock()
	return n, true, true
}

// fill caches what a read found, unless a commit ran since gen g.
func (c *valueCache) fill(key, v []byte, found bool, g uint64) {
	sh := c.shard(key)
	sh.Lock()
	defer sh.Unlock()
	if c.gen.Load() != g {
		return
	}
	c.putLocked(sh, key, v, found)
}

func (c *valueCache) putLocked(sh *cacheShard, key, v []byte, found bool) {
	if len(sh.m) >= c.max {
		if _, ok := sh.m[string(key)]; !ok {
			clear(sh.m)
		}
	}
	sh.m[string(key)] = cacheEntry{v: v, found: found}
}

// applied puts what batch b wrote into the cache; the caller has applied
// b and holds the store's write lock.
func (c *valueCache) applied(b *pebble.Batch) {
	c.gen.Add(1)
	r := b.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			c.reset()
			return
		}
		if !ok {
			return
		}
		if kind == pebble.InternalKeyKindRangeDelete {
			if rangeCached(k, v) {
				c.reset()
			}
			continue
		}
		if !cachedKey(k) {
			continue
		}
		sh := c.shard(k)
		sh.Lock()
		switch kind {
		case pebble.InternalKeyKindSet:
			c.putLocked(sh, k, append([]byte(nil), v...), true)
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete:
			c.putLocked(sh, k, nil, false)
		default:
			delete(sh.m, string(k))
		}
		sh.Unlock()
	}
}

// noteAbsent caches key as known not to exist. The caller holds the
// store's write lock after a commit that leaves key absent unless the
// batch wrote it, and calls applied for that batch after: what the batch
// wrote then replaces the note.
func (c *valueCache) noteAbsent(key []byte) {
	if !cachedKey(key) {
		return
	}
	sh := c.shard(key)
	sh.Lock()
	c.putLocked(sh, key, nil, false)
	sh.Unlock()
}

// rangeCached reports whether [lo, hi) may hold cached records.
func rangeCached(lo, hi []byte) bool {
	for _, p := range []byte{pfxInode, pfxDirent, pfxLSOM, pfxLayout} {
		if bytes.Compare(lo, []byte{p + 1}) < 0 && bytes.Compare(hi, []byte{p}) > 0 {
			return true
		}
	}
	return false
}

// reset empties the cache.
func (c *valueCache) reset() {
	c.gen.Add(1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.Lock()
		clear(sh.m)
		sh.Unlock()
	}
}

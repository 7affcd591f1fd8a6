package mdd

import (
	"encoding/binary"
	"errors"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
)

// DirEntry is one entry Readdir returns. Cookie is the entry's own
// position (its name hash; 0 for ".", 1 for ".."): Readdir from Cookie
// starts with this entry again; the position after it is the next entry's
// Cookie, or the page's next cookie for the last one.
type DirEntry struct {
	Name   string
	FID    fid.FID
	Type   DType
	Cookie uint64
}

// Readdir returns up to max entries of directory dir from position cookie
// (0 to start), "." and ".." first as Lustre does, then entries in hash
// order, and the cookie to continue from (DirEnd when the directory is
// done). No permission is checked, as Lustre's mdd_readpage checks none:
// read permission is the open's (the client checks it at opendir with the
// opener's credentials), and a directory handle reads on whoever holds it
// and whatever chmod comes after, as Linux's does; the credentials a
// READDIR carries are the client's word anyway. Entries sharing a hash
// are never split across pages (a page may exceed max by the rare
// collision), so that a cookie is exact: every entry present for the
// whole of a readdir appears exactly once, whatever is created or removed
// meanwhile; an entry added or removed meanwhile appears at most once.
// Outcomes: the page; ENOENT, ENOTDIR, EINVAL (max < 1).
func (s *Store) Readdir(r Req, dir fid.FID, cookie uint64, max int) ([]DirEntry, uint64, error) {
	if max < 1 {
		return nil, 0, fail(syscall.EINVAL, "readdir %v: max %d", dir, max)
	}
	t := s.read(&r)
	defer t.done()
	if _, err := t.dir(dir); err != nil {
		return nil, 0, err
	}
	if cookie == DirEnd {
		return nil, DirEnd, nil
	}
	var out []DirEntry
	if cookie == cookieDot {
		out = append(out, DirEntry{Name: ".", FID: dir, Type: DTDir, Cookie: cookieDot})
	}
	if cookie <= cookieDotDot {
		p, err := t.parentOf(dir)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, DirEntry{Name: "..", FID: p, Type: DTDir, Cookie: cookieDotDot})
	}
	_, hi := fidPrefix(pfxDirent, dir)
	from := cookie
	if from < firstHash {
		from = firstHash
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: direntHashKey(dir, from), UpperBound: hi})
	if err != nil {
		return nil, 0, ioError(err, "readdir %v", dir)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		_, h, name, okKey := parseDirentKey(it.Key())
		if !okKey {
			return nil, 0, ioError(errors.New("bad dirent key"), "readdir %v", dir)
		}
		if len(out) >= max && h != out[len(out)-1].Cookie {
			return out, h, nil
		}
		f, typ, err := decodeDirent(it.Value())
		if err != nil {
			return nil, 0, ioError(err, "readdir %v: entry %q", dir, clampName(name))
		}
		out = append(out, DirEntry{Name: name, FID: f, Type: typ, Cookie: h})
	}
	return out, DirEnd, ioError(it.Error(), "readdir %v", dir)
}

// FID2Path returns every path of f from the root ("/" for the root, "/a/b"
// for others; one per hard link, sorted), walking link EAs. ENOENT if f
// does not exist or is an orphan with no links.
func (s *Store) FID2Path(f fid.FID) ([]string, error) {
	t := s.read(&Req{})
	defer t.done()
	if _, err := t.inode(f); err != nil {
		return nil, err
	}
	if f == RootFID {
		return []string{"/"}, nil
	}
	type link struct {
		parent fid.FID
		name   string
	}
	var links []link
	lo, hi := fidPrefix(pfxLink, f)
	if err := s.scanRange(lo, hi, func(k, _ []byte) error {
		_, p, name, ok := parseLinkKey(k)
		if !ok {
			return errors.New("bad link key")
		}
		links = append(links, link{p, name})
		return nil
	}); err != nil {
		return nil, ioError(err, "fid2path %v", f)
	}
	if len(links) == 0 {
		return nil, fail(syscall.ENOENT, "fid2path %v: no links", f)
	}
	var out []string
	for _, l := range links {
		parts := []string{l.name}
		for d, n := l.parent, 0; d != RootFID; n++ {
			if n > 4096 {
				return nil, ioError(syscall.ELOOP, "fid2path %v: too deep", f)
			}
			p, err := t.parentOf(d)
			if err != nil {
				return nil, err
			}
			name, err := t.nameIn(p, d)
			if err != nil {
				return nil, err
			}
			parts = append(parts, name)
			d = p
		}
		slices.Reverse(parts)
		out = append(out, "/"+strings.Join(parts, "/"))
	}
	sort.Strings(out)
	return out, nil
}

// nameIn returns the name of directory d in its parent p, from d's link EA.
func (t *tx) nameIn(p, d fid.FID) (string, error) {
	lo := linkKey(d, p, "")
	var name string
	err := t.s.scanRange(lo, prefixEnd(lo), func(k, _ []byte) error {
		_, _, name, _ = parseLinkKey(k)
		return errStop
	})
	if err == nil && name == "" {
		return "", fail(syscall.ENOENT, "no link of %v in %v", d, p)
	}
	return name, ioError(err, "link EA of %v", d)
}

// Statfs is what statfs reports of the MDT: inode counts from the store,
// block counts from the file system holding it.
type Statfs struct {
	Files   uint64 // inodes in all (Config.MaxInodes)
	Ffree   uint64
	Blocks  uint64
	Bfree   uint64
	Bavail  uint64
	Bsize   uint32
	Namelen uint32
}

// Statfs returns the MDT's counts.
func (s *Store) Statfs() (Statfs, error) {
	s.mu.RLock()
	used := s.mu.inodes
	s.mu.RUnlock()
	st := Statfs{Files: max(s.cfg.MaxInodes, used), Namelen: MaxName}
	st.Ffree = st.Files - used
	var fs syscall.Statfs_t
	if err := syscall.Statfs(s.cfg.Dir, &fs); err != nil {
		return Statfs{}, ioError(err, "statfs %s", s.cfg.Dir)
	}
	st.Blocks, st.Bfree, st.Bavail, st.Bsize = fs.Blocks, fs.Bfree, fs.Bavail, uint32(fs.Bsize)
	return st, nil
}

// PendingDestroys returns up to max destroy log records with ID > after,
// in ID order: files whose OST objects must be destroyed. The log is
// persistent: records stay until DestroyDone, across restarts.
func (s *Store) PendingDestroys(after uint64, max int) ([]DestroyRecord, error) {
	var out []DestroyRecord
	err := s.scanRange(u64Key(pfxDestroy, after+1), []byte{pfxDestroy + 1}, func(k, v []byte) error {
		if len(out) >= max {
			return errStop
		}
		d, err := decodeDestroy(binary.BigEndian.Uint64(k[1:]), v)
		out = append(out, d)
		return err
	})
	return out, ioError(err, "destroy log")
}

// DestroyDone removes destroy log record id once the objects are gone
// (idempotent: an unknown id is not an error).
func (s *Store) DestroyDone(id uint64) error {
	return ioError(s.db.Delete(u64Key(pfxDestroy, id), pebble.NoSync), "destroy done %d", id)
}

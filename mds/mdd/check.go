package mdd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/nacrefs/nacre/internal/errs"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// Check verifies the store's invariants, as an fsck would, and returns
// nil or an error (kind Internal, errno EIO) listing the first problems
// found:
//
//   - every record decodes, and every record keyed by a FID (layout,
//     xattr, LSOM, HSM, link EA, orphan) belongs to an existing inode;
//   - every entry's key hash matches its name, its parent is a directory
//     and its child exists with the entry's type;
//   - link EAs and entries are the same set of (parent, name, child);
//   - a file's link count is its number of entries; a directory's is 2
//     plus its subdirectories, and it has exactly one entry (the root
//     none); every directory reaches the root through its parents;
//   - inodes with no links are exactly the registered orphans;
//   - the ACL flags of inodes match their ACL xattrs, which parse;
//   - the inode, changelog and destroy counters agree with the records,
//     and the FLD ranges are sorted and disjoint;
//   - no object of a layout or destroy record comes after its OST's last
//     object (LastObjects), so the orphan cleanup never destroys one.
//
// It holds the store's read lock throughout: writers wait. Meant for
// tests, the crash test and an offline check; it reads everything.
func (s *Store) Check() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var problems []error
	bad := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	inodes := map[fid.FID]*inode{}
	type link struct {
		child, parent fid.FID
		name          string
	}
	entries := map[link]DType{}
	links := map[link]bool{}
	nEntries := map[fid.FID]uint32{}
	subdirs := map[fid.FID]uint32{}
	orphans := map[fid.FID]bool{}
	parents := map[fid.FID]fid.FID{}
	owned := map[byte][]fid.FID{}
	plainXattrs := map[fid.FID]bool{} // inodes with extended attributes other than the ACLs
	lastObj := map[uint32]fid.FID{}
	var objects []layout.Object
	noteObjects := func(l layout.Layout) {
		for _, c := range l.Components {
			objects = append(objects, c.Objects...)
		}
	}
	err := s.scan(nil, func(k, v []byte) error {
		switch k[0] {
		case pfxInode:
			n, err := decodeInode(v)
			if err != nil || len(k) != 1+fidLen || getFID(k[1:]) != n.FID {
				bad("inode %x: %v", k, err)
				return nil
			}
			inodes[n.FID] = &n
		case pfxDirent:
			p, h, name, ok := parseDirentKey(k)
			child, typ, err := decodeDirent(v)
			if !ok || err != nil || h != NameHash(name) || checkNewName(name) != nil {
				bad("dirent %q: %v", k, err)
				return nil
			}
			l := link{child, p, name}
			entries[l] = typ
			nEntries[child]++
			if typ == DTDir {
				subdirs[p]++
				parents[child] = p
			}
		case pfxLink:
			c, p, name, ok := parseLinkKey(k)
			if !ok || len(v) != 0 {
				bad("link EA %x", k)
				return nil
			}
			links[link{c, p, name}] = true
			owned[pfxLink] = append(owned[pfxLink], c)
		case pfxLayout, pfxLSOM, pfxHSM, pfxOrphan:
			if len(k) != 1+fidLen {
				bad("record %x", k)
				return nil
			}
			f := getFID(k[1:])
			owned[k[0]] = append(owned[k[0]], f)
			var err error
			switch k[0] {
			case pfxLayout:
				var l layout.Layout
				l, err = layout.Unmarshal(v)
				noteObjects(l)
			case pfxLSOM:
				_, err = decodeLSOM(v)
			case pfxHSM:
				_, err = decodeHSM(v)
			case pfxOrphan:
				orphans[f] = true
			}
			if err != nil {
				bad("record of %v: %v", f, err)
			}
		case pfxXattr:
			if len(k) <= 1+fidLen {
				bad("xattr %x", k)
				return nil
			}
			f := getFID(k[1:])
			owned[pfxXattr] = append(owned[pfxXattr], f)
			if name := string(k[1+fidLen:]); name == XattrACLAccess || name == XattrACLDefault {
				if a, err := ParseACL(v); err != nil || a == nil {
					bad("%s of %v: %v", name, f, err)
				}
			} else {
				plainXattrs[f] = true
			}
		case pfxCLRec:
			r, err := DecodeChangelogRecord(v)
			if err != nil || len(k) != 9 || r.Index != binary.BigEndian.Uint64(k[1:]) || r.Index >= s.mu.clNext || r.Index < s.mu.clFirst {
				bad("changelog record %x: %v", k, err)
			}
		case pfxDestroy:
			id := binary.BigEndian.Uint64(k[1:])
			d, err := decodeDestroy(id, v)
			if err != nil || id >= s.mu.destroyNext {
				bad("destroy record %d: %v", id, err)
			}
			noteObjects(d.Layout)
		case pfxLastObj:
			ost, f, err := decodeLastObj(k, v)
			if err != nil || s.mu.lastObj[ost] != f {
				bad("last object record %x: %v (in memory %v)", k, err, s.mu.lastObj[ost])
			}
			lastObj[ost] = f
		}
		return nil
	})
	if err != nil {
		return ioError(err, "check: scan")
	}
	for l, typ := range entries {
		if dt, ok := dtypeOf(inodes, l.child); ok && dt != typ {
			bad("dirent %q in %v: type %d, inode %v is %d", l.name, l.parent, typ, l.child, dt)
		}
		if !links[l] {
			bad("entry %q in %v → %v has no link EA", l.name, l.parent, l.child)
		}
		if p := inodes[l.parent]; p == nil || !isDir(p.Mode) {
			bad("entry %q: parent %v is not a directory", l.name, l.parent)
		}
		if inodes[l.child] == nil {
			bad("entry %q in %v: no inode %v", l.name, l.parent, l.child)
		}
	}
	for l := range links {
		if _, ok := entries[l]; !ok {
			bad("link EA %v ← %q in %v has no entry", l.child, l.name, l.parent)
		}
	}
	for pfx, fids := range owned {
		for _, f := range fids {
			if inodes[f] == nil {
				bad("record %c of %v without an inode", pfx, f)
			}
		}
	}
	for f, n := range inodes {
		want := nEntries[f]
		if isDir(n.Mode) {
			switch {
			case f == RootFID && want != 0:
				bad("root has %d entries", want)
			case f != RootFID && n.Nlink > 0 && want != 1:
				bad("directory %v has %d entries", f, want)
			case n.Nlink > 0 && n.Nlink != 2+subdirs[f]:
				bad("directory %v: nlink %d, %d subdirectories", f, n.Nlink, subdirs[f])
			}
		} else if n.Nlink != want {
			bad("%v: nlink %d, %d entries", f, n.Nlink, want)
		}
		if (n.Nlink == 0) != orphans[f] {
			bad("%v: nlink %d, orphan %v", f, n.Nlink, orphans[f])
		}
		if (n.Nlink == 0) && want != 0 {
			bad("orphan %v has %d entries", f, want)
		}
		if plainXattrs[f] && n.iflags&inoXattrsTracked != 0 && n.iflags&inoXattrs == 0 {
			bad("%v: extended attributes without the inode's flag for them", f)
		}
		for _, a := range []struct {
			bit  uint8
			name string
		}{{inoACL, XattrACLAccess}, {inoDefaultACL, XattrACLDefault}} {
			_, err := s.get(xattrKey(f, a.name))
			if (err == nil) != (n.iflags&a.bit != 0) {
				bad("%v: ACL flag %v, %s %v", f, n.iflags&a.bit != 0, a.name, err)
			}
		}
		if isDir(n.Mode) && n.Nlink > 0 {
			d := f
			for i := 0; d != RootFID; i++ {
				p, ok := parents[d]
				if !ok || i > len(inodes) {
					bad("directory %v does not reach the root (stuck at %v)", f, d)
					break
				}
				d = p
			}
		}
	}
	if inodes[RootFID] == nil {
		bad("no root")
	}
	for _, o := range objects {
		if last := lastObj[o.OSTIndex]; fid.Compare(o.Object, last) > 0 {
			bad("object %v on OST%04x is after the OST's last object %v", o.Object, o.OSTIndex, last)
		}
	}
	if len(lastObj) != len(s.mu.lastObj) {
		bad("%d last object records, %d in memory", len(lastObj), len(s.mu.lastObj))
	}
	if uint64(len(inodes)) != s.mu.inodes {
		bad("%d inodes, counter says %d", len(inodes), s.mu.inodes)
	}
	for i := 1; i < len(s.mu.fld); i++ {
		if s.mu.fld[i].Start < s.mu.fld[i-1].End {
			bad("fld ranges %v and %v overlap", s.mu.fld[i-1], s.mu.fld[i])
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errs.Errorf(errs.Internal, "mdd: check %s: %w (%w)", s.cfg.Dir, errors.Join(problems...), syscall.EIO)
}

func dtypeOf(inodes map[fid.FID]*inode, f fid.FID) (DType, bool) {
	n := inodes[f]
	if n == nil {
		return 0, false
	}
	return dtype(n.Mode)
}

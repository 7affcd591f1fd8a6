package mdd

import (
	"errors"
	"syscall"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// SwapLayouts exchanges the layouts (and with them the lazy sizes) of the
// regular files a and b, Lustre's MDS_SWAP_LAYOUTS: each keeps its FID,
// names and attributes and gets the other's objects, which is how lfs
// migrate restripes a file without changing its identity. Each layout's
// generation goes past both old ones, so clients caching either fetch it
// again. The caller needs write permission on both. EINVAL for one file
// twice or a file that is not regular, ENOENT, EACCES; EBUSY if dvA is
// not nil and a's data version is no longer *dvA, or if either file is
// open for write (not for a replay: see Req.Replay). A LYOUT changelog
// record is written for each.
//
// Why refuse open files: a writer's dirty pages belong to the objects its
// file had when it wrote them. lfs migrate unlinks its copy after the
// swap, and the OSTs destroy the objects the copy got, calling back every
// client's locks on them with DISCARD_DATA: pages a writer of a had not
// yet written back would be dropped without a word, and the data version
// does not know of them (it moves when a writer closes). Lustre's lfs
// migrate keeps writers out with a group lock or a lease; here the MDT,
// which counts the opens, says no, and lfs migrate tries again.
func (s *Store) SwapLayouts(r Req, a, b fid.FID, dvA *uint64) error {
	if a == b {
		return fail(syscall.EINVAL, "swap layouts of %v with itself", a)
	}
	t := s.begin(&r)
	return t.finish(t.swapLayouts(a, b, dvA))
}

func (t *tx) swapLayouts(a, b fid.FID, dvA *uint64) error {
	if dvA != nil {
		h, err := t.hsmOf(a)
		if err != nil {
			return err
		}
		if h.DataVersion != *dvA {
			return fail(syscall.EBUSY, "swap layouts of %v: its data changed (version %d, expected %d)", a, h.DataVersion, *dvA)
		}
	}
	fids := [2]fid.FID{a, b}
	for _, f := range fids {
		switch n := t.s.mu.writers[f]; {
		case t.r.Replay:
		case n > 0:
			return fail(syscall.EBUSY, "swap layouts of %v: open for write (%d)", f, n)
		case t.s.mu.recovering:
			// A client holding it open for write may not have noticed the
			// restart yet (it does at its next request or ping).
			return fail(syscall.EBUSY, "swap layouts of %v: in recovery, opens for write not all replayed", f)
		}
	}
	var ns [2]*inode
	for i, f := range fids {
		n, err := t.inode(f)
		if err != nil {
			return err
		}
		if n.Mode&S_IFMT != S_IFREG {
			return fail(syscall.EINVAL, "swap layouts of %v: not a regular file", f)
		}
		if err := n.fixed("swap layouts of"); err != nil {
			return err // (append-only too: the data would change)
		}
		if err := t.may(n, MayWrite); err != nil {
			return err
		}
		ns[i] = n
	}
	var ls [2]*layout.Layout
	var som [2][]byte
	var gen uint32
	for i, f := range fids {
		l, err := t.layoutOf(f)
		if err != nil {
			return err
		}
		if l != nil {
			gen = max(gen, l.Gen)
		}
		ls[i] = l
		v, err := t.s.get(fidKey(pfxLSOM, f))
		switch {
		case errors.Is(err, pebble.ErrNotFound):
		case err != nil:
			return ioError(err, "lsom of %v", f)
		default:
			som[i] = append([]byte(nil), v...)
		}
	}
	for i, f := range fids {
		if other := ls[1-i]; other == nil {
			t.b.Delete(fidKey(pfxLayout, f), nil)
		} else {
			l := other.Clone()
			l.Gen = gen + 1
			v, err := l.Marshal()
			if err != nil {
				return ioError(err, "layout of %v", f)
			}
			t.b.Set(fidKey(pfxLayout, f), v, nil)
		}
		if som[1-i] == nil {
			t.b.Delete(fidKey(pfxLSOM, f), nil)
		} else {
			t.b.Set(fidKey(pfxLSOM, f), som[1-i], nil)
		}
		ns[i].Ctime = t.now
		t.touch(ns[i])
		t.changelog(ChangelogRecord{Type: CLLayout, TFID: f})
	}
	return nil
}

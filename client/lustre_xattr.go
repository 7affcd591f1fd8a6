package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

// The lustre.* extended attributes are virtual: the library answers them
// itself (the MDT stores no such names), so that a tool reaches what
// Lustre's lfs asks the kernel with ioctls through any mount, the FUSE
// mount included (it passes extended attributes through untouched). Every
// one of them may be read on any file of the mount unless its comment
// says otherwise. A value is binary where Lustre's is (the layout), text
// where it is one number or name, and JSON where a tool reads several
// fields (the types below).
const (
	// XattrLOV is a regular file's layout or a directory's default layout
	// (Lustre's lustre.lov), in internal/layout's encoding. Reading it
	// gives ENODATA for a file without objects (created with
	// O_LOV_DELAY_CREATE and given no layout yet) and for a directory without a default of its own (new
	// files there get the root's, else the file system's).
	//
	// Setting it gives the MDT a template (objects in the value are
	// dropped; the MDT picks the OSTs): on a regular file without objects
	// it instantiates the layout (lfs setstripe: open with
	// O_LOV_DELAY_CREATE, then this); on a directory it sets the default
	// for files made there later. On a file that has objects already the
	// value is ignored, as Lustre ignores it so that cp, rsync and tar
	// copying every attribute succeed, unless XATTR_CREATE asks for
	// EEXIST. Removing it from a directory drops its default (see
	// lustreRemovexattr); from a file, EOPNOTSUPP.
	XattrLOV = "lustre.lov"
	// XattrSwapLayouts may only be set, on a regular file A, to
	// "FID [DATA_VERSION]": A and the regular file FID exchange their
	// layouts (OST objects) and lazy sizes, keeping their FIDs, names and
	// attributes (Lustre's MDS_SWAP_LAYOUTS; lfs migrate copies A's data
	// to a new file, then swaps). With DATA_VERSION (decimal, as
	// XattrDataVersion gives it) the swap is refused with EBUSY if A's
	// data changed since.
	XattrSwapLayouts = "lustre.swap_layouts"
	// XattrFID is the file's FID as Lustre prints it,
	// "[0x200000400:0x1:0x0]" (lfs path2fid).
	XattrFID = "lustre.fid"
	// XattrLSOM is the file's attributes as the MDT has them, JSON
	// MDTAttr: for a regular file the lazy size and blocks (LSOM), which
	// cost no OST a request (lfs find --lazy).
	XattrLSOM = "lustre.lsom"
	// XattrDataVersion is a regular file's data version in decimal: it
	// changes with every change of the data recorded on the MDT (a close
	// after writes, a truncate) — lfs data_version, and lfs migrate's
	// check that nobody wrote meanwhile.
	XattrDataVersion = "lustre.data_version"
	// XattrMDTIndex is the index of the MDT holding the file, in decimal.
	XattrMDTIndex = "lustre.mdt_index"
	// XattrInstance is the mount's name, FSNAME-INSTANCE
	// ("nacre-ffff0123456789ab", lfs getname).
	XattrInstance = "lustre.instance"
	// XattrStatfs is the space and inodes of every target, JSON
	// []TargetStatfs: the MDT, then each OST the mount knows, ascending
	// (lfs df). Each target is asked once (all at once); one that does
	// not answer within the mount's timeout (5 s with lazystatfs) has its
	// error in its entry.
	XattrStatfs = "lustre.statfs"
	// XattrTargets is the targets the mount knows and whether they are
	// active, JSON []TargetInfo, without asking any (lfs osts, lfs mdts).
	XattrTargets = "lustre.targets"
	// XattrPools is the file system's OST pools, JSON []PoolInfo, as the
	// MGS has them now (lfs pool_list).
	XattrPools = "lustre.pools"
	// XattrFID2PathPrefix followed by a FID ("lustre.fid2path.[0x200000400:0x1:0x0]")
	// is every path of that file from the root, JSON [][]byte (paths are
	// bytes: names need not be UTF-8), "/" for the root (lfs fid2path).
	// The caller needs CAP_DAC_READ_SEARCH (the MDT's rule).
	XattrFID2PathPrefix = "lustre.fid2path."
	// XattrReaddirPrefix followed by a cookie in hex ("lustre.readdir.0"
	// for the start) is, on a directory, a page of its entries from that
	// cookie with each one's attributes and layout as the MDT has them,
	// JSON DirPage: what lfs find decides on without asking an OST. The
	// page ends when its encoding nears the 64 KiB an extended attribute
	// may hold; Next says where the next one starts. "." and ".." are
	// left out. The caller needs read permission on the directory.
	XattrReaddirPrefix = "lustre.readdir."
	// XattrHSM is a regular file's HSM state, JSON HSMInfo (lfs
	// hsm_state); EINVAL on a file that is not regular. Setting it to
	// JSON HSMFlagsChange sets then clears flags (lfs hsm_set, hsm_clear:
	// the owner or root).
	XattrHSM = "lustre.hsm"
	// XattrHSMRelease, set (to any value) on an archived regular file,
	// releases it (lfs hsm_release; see FS.HSMRelease for its errors).
	// It cannot be read.
	XattrHSMRelease = "lustre.hsm_release"
)

// HSMInfo is a file's HSM state (XattrHSM): Flags are HSM* (Lustre's
// HS_*), ArchiveID the archive holding its copy, DataVersion its data's
// version now and ArchivedVersion the one its archive copy holds.
type HSMInfo struct {
	Flags           uint32 `json:"flags"`
	ArchiveID       uint32 `json:"archive_id"`
	DataVersion     uint64 `json:"data_version"`
	ArchivedVersion uint64 `json:"archived_version"`
}

// HSMFlagsChange sets Set then clears Clear (HSM* flags) and, if
// ArchiveID is not 0, sets the archive id (XattrHSM).
type HSMFlagsChange struct {
	Set       uint32 `json:"set"`
	Clear     uint32 `json:"clear"`
	ArchiveID uint32 `json:"archive_id"`
}

// lustrePrefix is the namespace of the virtual attributes.
const lustrePrefix = "lustre."

// MDTAttr is a file's attributes as the MDT has them (XattrLSOM, and
// entries of a DirPage). A regular file's Size and Blocks are its lazy
// size (LSOM, recorded by the last close that wrote), which its objects
// may have outgrown since; Mtime likewise is the one that close recorded.
// Times are nanoseconds since the epoch.
type MDTAttr struct {
	FID    string `json:"fid"`
	Mode   uint32 `json:"mode"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	Nlink  uint32 `json:"nlink"`
	Size   uint64 `json:"size"`
	Blocks uint64 `json:"blocks"`
	Atime  int64  `json:"atime"`
	Mtime  int64  `json:"mtime"`
	Ctime  int64  `json:"ctime"`
}

func mdtAttrOf(a Attr) MDTAttr {
	return MDTAttr{FID: a.FID.String(), Mode: a.Mode, UID: a.UID, GID: a.GID, Nlink: a.Nlink, Size: a.Size, Blocks: a.Blocks,
		Atime: a.Atime, Mtime: a.Mtime, Ctime: a.Ctime}
}

// TargetStatfs is one target's space and inodes (XattrStatfs). Blocks,
// Bfree and Bavail are in Bsize units. Error, when set, says why the
// target did not answer (Errno is its errno, 0 if none applies), and the
// counts are zero.
type TargetStatfs struct {
	Type   string `json:"type"` // "MDT" or "OST"
	Index  uint32 `json:"index"`
	UUID   string `json:"uuid"`
	Bsize  uint32 `json:"bsize"`
	Blocks uint64 `json:"blocks"`
	Bfree  uint64 `json:"bfree"`
	Bavail uint64 `json:"bavail"`
	Files  uint64 `json:"files"`
	Ffree  uint64 `json:"ffree"`
	Error  string `json:"error,omitempty"`
	Errno  int    `json:"errno,omitempty"`
}

// TargetInfo is a target the mount knows (XattrTargets): Active unless
// its connection was shut.
type TargetInfo struct {
	Type   string `json:"type"` // "MDT" or "OST"
	Index  uint32 `json:"index"`
	UUID   string `json:"uuid"`
	Active bool   `json:"active"`
}

// PoolInfo is an OST pool (XattrPools): its name and OST indexes,
// ascending.
type PoolInfo struct {
	Name string   `json:"name"`
	OSTs []uint32 `json:"osts"`
}

// DirPage is a page of a directory's entries (XattrReaddirPrefix). Next
// is the cookie of the next page, DirEnd after the last.
type DirPage struct {
	Next    uint64         `json:"next"`
	Entries []DirPageEntry `json:"entries"`
}

// DirPageEntry is an entry of a DirPage: its name (bytes), FID and type
// (a DT_* value), and the MDT's attributes and layout of the file it
// leads to (Layout in internal/layout's encoding; a directory's default).
// Attr is nil (and Layout empty) when the file went between the read of
// the page and of its attributes, and for a caller who may read the
// directory but not search it (stat would fail too).
type DirPageEntry struct {
	Name   []byte   `json:"name"`
	FID    string   `json:"fid"`
	Type   uint8    `json:"type"`
	Attr   *MDTAttr `json:"attr,omitempty"`
	Layout []byte   `json:"layout,omitempty"`
}

// maxDirPage bounds a DirPage's encoding below the 64 KiB (XATTR_SIZE_MAX)
// the kernel lets an extended attribute's value be, with room for the
// entry that crosses it.
const maxDirPage = 48 << 10

// defaultTemplate is the layout the MDT gives files when no directory
// has a default (its Config.DefaultStripe, which nothing configures
// otherwise).
func defaultTemplate() layout.Layout {
	return layout.Plain(layout.RAID0{StripeCount: layout.DefaultStripeCount, StripeSize: layout.DefaultStripeSize,
		StripeOffset: layout.AnyOffset})
}

// template returns l as a layout template: its objects dropped (the MDT
// allocates new ones), its generation zero.
func template(l layout.Layout) layout.Layout {
	t := l.Clone()
	t.Gen = 0
	for i := range t.Components {
		t.Components[i].Objects = nil
	}
	return t
}

// mdtAttrLayout returns f's attributes as the MDT has them and its layout
// (a directory's default), from the cache when it holds a regular file's.
func (fs *FS) mdtAttrLayout(ctx context.Context, cred Cred, f FID) (Attr, *layout.Layout, error) {
	if a, lay, ok := fs.cache.attr(f); ok && a.Mode&sIFMT != sIFDIR {
		return a, lay, nil
	}
	return fs.mdc.GetattrLayout(ctx, cred, f)
}

// lustreGetxattr answers a lustre.* attribute (handled false for another
// name, which goes to the MDT). Errors: ENODATA for a name it does not
// know or a value that does not exist, and those of the requests it makes.
func (fs *FS) lustreGetxattr(ctx context.Context, cred Cred, f FID, name string) (value []byte, handled bool, err error) {
	if !strings.HasPrefix(name, lustrePrefix) {
		return nil, false, nil
	}
	ctx, cancel := fs.op(ctx)
	defer cancel()
	switch {
	case name == XattrLOV:
		_, lay, err := fs.mdtAttrLayout(ctx, cred, f)
		if err != nil {
			return nil, true, err
		}
		if lay == nil {
			return nil, true, fmt.Errorf("%s of %v: no layout: %w", name, f, syscall.ENODATA)
		}
		v, err := lay.Marshal()
		return v, true, err
	case name == XattrFID:
		return []byte(f.String()), true, nil
	case name == XattrLSOM:
		a, _, err := fs.mdtAttrLayout(ctx, cred, f)
		if err != nil {
			return nil, true, err
		}
		v, err := json.Marshal(mdtAttrOf(a))
		return v, true, err
	case name == XattrDataVersion:
		st, err := fs.HSMState(ctx, cred, f)
		if err != nil {
			return nil, true, err
		}
		return strconv.AppendUint(nil, st.DataVersion, 10), true, nil
	case name == XattrHSM:
		st, err := fs.HSMState(ctx, cred, f)
		if err != nil {
			return nil, true, err
		}
		v, err := json.Marshal(HSMInfo{Flags: st.Flags, ArchiveID: st.ArchiveID, DataVersion: st.DataVersion, ArchivedVersion: st.ArchivedVersion})
		return v, true, err
	case name == XattrMDTIndex:
		return []byte("0"), true, nil
	case name == XattrInstance:
		return []byte(fs.cfg.FSName + "-" + fs.Instance()), true, nil
	case name == XattrStatfs:
		v, err := json.Marshal(fs.targetStatfs(ctx))
		return v, true, err
	case name == XattrTargets:
		v, err := json.Marshal(fs.targets())
		return v, true, err
	case name == XattrPools:
		conf, err := fs.fetchConfig(ctx)
		if err != nil {
			return nil, true, err
		}
		pools := []PoolInfo{}
		for _, p := range conf.GetPools() {
			pools = append(pools, PoolInfo{Name: p.GetName(), OSTs: append([]uint32{}, p.GetOsts()...)})
		}
		v, err := json.Marshal(pools)
		return v, true, err
	case strings.HasPrefix(name, XattrFID2PathPrefix):
		target, err := fid.Parse(name[len(XattrFID2PathPrefix):])
		if err != nil {
			return nil, true, fmt.Errorf("%s: %v: %w", name, err, syscall.EINVAL)
		}
		paths, err := fs.mdc.FID2Path(ctx, cred, target)
		if err != nil {
			return nil, true, err
		}
		out := make([][]byte, len(paths))
		for i, p := range paths {
			out[i] = []byte(p)
		}
		v, err := json.Marshal(out)
		return v, true, err
	case strings.HasPrefix(name, XattrReaddirPrefix):
		cookie, err := strconv.ParseUint(name[len(XattrReaddirPrefix):], 16, 64)
		if err != nil {
			return nil, true, fmt.Errorf("%s: cookie: %w", name, syscall.EINVAL)
		}
		page, err := fs.dirPage(ctx, cred, f, cookie)
		if err != nil {
			return nil, true, err
		}
		v, err := json.Marshal(page)
		return v, true, err
	}
	return nil, true, fmt.Errorf("%s: no such attribute: %w", name, syscall.ENODATA)
}

// lustreSetxattr sets lustre.lov (see XattrLOV), lustre.hsm (XattrHSM)
// and lustre.hsm_release (XattrHSMRelease); the other lustre.* names
// cannot be set (EOPNOTSUPP). handled is false for another name.
func (fs *FS) lustreSetxattr(ctx context.Context, cred Cred, f FID, name string, value []byte, flags int) (handled bool, err error) {
	if !strings.HasPrefix(name, lustrePrefix) {
		return false, nil
	}
	switch name {
	case XattrSwapLayouts:
		return true, fs.swapLayoutsXattr(ctx, cred, f, value)
	case XattrHSM:
		var ch HSMFlagsChange
		if err := json.Unmarshal(value, &ch); err != nil {
			return true, fmt.Errorf("%s of %v: want JSON {\"set\":FLAGS,\"clear\":FLAGS,\"archive_id\":N}: %v: %w", name, f, err, syscall.EINVAL)
		}
		_, err := fs.HSMSetFlags(ctx, cred, f, ch.Set, ch.Clear, ch.ArchiveID)
		return true, err
	case XattrHSMRelease:
		_, err := fs.HSMRelease(ctx, cred, f)
		return true, err
	}
	if name != XattrLOV {
		return true, fmt.Errorf("%s: read-only: %w", name, syscall.EOPNOTSUPP)
	}
	if err := fs.writable(); err != nil {
		return true, err
	}
	l, err := layout.Unmarshal(value)
	if err != nil {
		return true, fmt.Errorf("%s of %v: %v: %w", name, f, err, syscall.EINVAL)
	}
	octx, cancel := fs.op(ctx)
	a, cur, err := fs.mdtAttrLayout(octx, cred, f)
	cancel()
	if err != nil {
		return true, err
	}
	switch a.Mode & sIFMT {
	case sIFREG, sIFDIR:
	default:
		return true, fmt.Errorf("%s of %v (mode %#o): %w", name, f, a.Mode, syscall.EINVAL)
	}
	// Lustre's b=10667: cp -a, rsync -X and tar --xattrs set the layout
	// they read on files that have objects already, which keep theirs
	// (the MDT would refuse it with EEXIST: no need to ask it).
	// Only for a caller the MDT would let write the file anyway (root, or
	// its owner with write permission; others ask the MDT, which checks).
	exists := a.Mode&sIFMT == sIFREG && cur != nil && anyObjects(cur) && a.Flags == 0 &&
		(cred.Cap&mdc.CapDacOverride != 0 || cred.UID == a.UID && a.Mode&0o200 != 0)
	if !exists {
		_, err = fs.SetLayout(ctx, cred, f, template(l))
		exists = errors.Is(err, syscall.EEXIST)
	}
	switch {
	case exists && flags&XattrCreate != 0:
		return true, fmt.Errorf("%s of %v: the file has objects: %w", name, f, syscall.EEXIST)
	case exists:
		return true, nil
	}
	return true, err
}

// lustreRemovexattr removes lustre.lov from a directory (lfs setstripe
// -d): new files there get the root's default, else the file system's.
// handled is false for a name outside lustre.*.
func (fs *FS) lustreRemovexattr(ctx context.Context, cred Cred, f FID, name string) (handled bool, err error) {
	if !strings.HasPrefix(name, lustrePrefix) {
		return false, nil
	}
	if name != XattrLOV {
		return true, fmt.Errorf("%s: read-only: %w", name, syscall.EOPNOTSUPP)
	}
	if err := fs.writable(); err != nil {
		return true, err
	}
	octx, cancel := fs.op(ctx)
	defer cancel()
	a, lay, err := fs.mdtAttrLayout(octx, cred, f)
	if err != nil {
		return true, err
	}
	if a.Mode&sIFMT != sIFDIR {
		return true, fmt.Errorf("remove %s of %v: not a directory: %w", name, f, syscall.EOPNOTSUPP)
	}
	if lay == nil {
		return true, fmt.Errorf("remove %s of %v: no default layout: %w", name, f, syscall.ENODATA)
	}
	err = fs.mdc.RemoveDefaultLayout(octx, cred, f)
	fs.cache.invalidate(f)
	return true, err
}

// lustreListxattr adds lustre.lov to names when f has a layout of its own
// (Lustre lists it, so that copies carry it); an error leaves names as
// they are.
func (fs *FS) lustreListxattr(ctx context.Context, cred Cred, f FID, names []string) []string {
	a, lay, err := fs.mdtAttrLayout(ctx, cred, f)
	if err != nil || lay == nil || (a.Mode&sIFMT != sIFREG && a.Mode&sIFMT != sIFDIR) {
		return names
	}
	return append(names, XattrLOV)
}

// targets lists the MDT and the OSTs the mount has connections to.
func (fs *FS) targets() []TargetInfo {
	imp := fs.mdc.Import()
	out := []TargetInfo{{Type: "MDT", Index: 0, UUID: imp.Target() + "_UUID", Active: imp.State() != ptlrpc.StateClosed}}
	for _, i := range fs.OSTs() {
		o, err := fs.OSC(i)
		if err != nil {
			continue
		}
		out = append(out, TargetInfo{Type: "OST", Index: i, UUID: o.Import().Target() + "_UUID", Active: o.Import().State() != ptlrpc.StateClosed})
	}
	return out
}

// targetStatfs asks every target for its space and inodes, all at once.
func (fs *FS) targetStatfs(ctx context.Context) []TargetStatfs {
	ts := fs.targets()
	out := make([]TargetStatfs, len(ts))
	done := make(chan struct{}, len(ts))
	fail := func(st *TargetStatfs, err error) {
		st.Error = err.Error()
		var errno syscall.Errno
		switch {
		case errors.As(err, &errno):
			st.Errno = int(errno)
		case errors.Is(err, context.DeadlineExceeded):
			st.Errno = int(syscall.ETIMEDOUT)
		}
	}
	for i, t := range ts {
		out[i] = TargetStatfs{Type: t.Type, Index: t.Index, UUID: t.UUID}
		go func() {
			defer func() { done <- struct{}{} }()
			st := &out[i]
			sctx := ctx
			if fs.cfg.LazyStatfs {
				var cancel context.CancelFunc
				sctx, cancel = context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
			}
			if t.Type == "MDT" {
				m, err := fs.mdc.Statfs(sctx)
				if err != nil {
					fail(st, err)
					return
				}
				st.Bsize, st.Blocks, st.Bfree, st.Bavail, st.Files, st.Ffree = m.Bsize, m.Blocks, m.Bfree, m.Bavail, m.Files, m.Ffree
				return
			}
			o, err := fs.OSC(t.Index)
			if err != nil {
				fail(st, err)
				return
			}
			r, err := o.Statfs(sctx)
			if err != nil {
				fail(st, err)
				return
			}
			st.Bsize, st.Blocks, st.Bfree, st.Bavail, st.Files, st.Ffree = r.GetBsize(), r.GetBlocks(), r.GetBfree(), r.GetBavail(), r.GetFiles(), r.GetFfree()
		}()
	}
	for range ts {
		<-done
	}
	return out
}

// dirPage reads a page of dir's entries from cookie with their attributes
// and layouts (see XattrReaddirPrefix).
// Each read is an open of its own: the caller needs read permission on
// dir, which the MDT's READDIR does not check (see Access).
func (fs *FS) dirPage(ctx context.Context, cred Cred, dir FID, cookie uint64) (*DirPage, error) {
	if err := fs.Access(ctx, cred, dir, accessRead); err != nil {
		return nil, err
	}
	ents, next, err := fs.mdc.ReadPage(ctx, cred, dir, cookie, 0)
	if err != nil {
		return nil, err
	}
	// The entries' attributes are what stat would show: only to those
	// who may search the directory (by its mode bits: an ACL that would
	// let the caller search it is not looked at).
	da, _, err := fs.mdc.GetattrLayout(ctx, cred, dir)
	if err != nil {
		return nil, err
	}
	search := MayAccess(cred, da, nil, 1) // (X_OK, by the mode bits alone)
	page := &DirPage{Next: next, Entries: []DirPageEntry{}}
	size := 64
	for i, e := range ents {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		pe := DirPageEntry{Name: []byte(e.Name), FID: e.FID.String(), Type: e.Type}
		var a Attr
		var lay *layout.Layout
		var err error
		if search {
			a, lay, err = fs.mdtAttrLayout(ctx, cred, e.FID)
		}
		switch {
		case !search:
		case err == nil:
			ma := mdtAttrOf(a)
			pe.Attr = &ma
			if lay != nil {
				if pe.Layout, err = lay.Marshal(); err != nil {
					return nil, err
				}
			}
		case !errors.Is(err, syscall.ENOENT):
			return nil, err
		}
		b, err := json.Marshal(pe)
		if err != nil {
			return nil, err
		}
		if size+len(b) > maxDirPage && i > 0 && e.Cookie != ents[i-1].Cookie && len(page.Entries) > 0 {
			// Cut here: the next page starts with this entry (never
			// among entries sharing a cookie, which would repeat).
			page.Next = e.Cookie
			break
		}
		size += len(b) + 1
		page.Entries = append(page.Entries, pe)
	}
	return page, nil
}

// swapLayoutsXattr sets XattrSwapLayouts on f to value.
func (fs *FS) swapLayoutsXattr(ctx context.Context, cred Cred, f FID, value []byte) error {
	fields := strings.Fields(string(value))
	if len(fields) < 1 || len(fields) > 2 {
		return fmt.Errorf("%s of %v: %q: want \"FID [DATA_VERSION]\": %w", XattrSwapLayouts, f, value, syscall.EINVAL)
	}
	other, err := fid.Parse(fields[0])
	if err != nil {
		return fmt.Errorf("%s of %v: %v: %w", XattrSwapLayouts, f, err, syscall.EINVAL)
	}
	var dv *uint64
	if len(fields) == 2 {
		n, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return fmt.Errorf("%s of %v: data version %q: %w", XattrSwapLayouts, f, fields[1], syscall.EINVAL)
		}
		dv = &n
	}
	return fs.SwapLayouts(ctx, cred, f, other, dv)
}

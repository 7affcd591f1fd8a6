// Package posix is Nacre's POSIX copytool (Lustre's lhsmtool_posix): an
// hsm.Handler that archives files into a FID-named tree under a local
// directory and restores them from it, through the client library.
//
// An archive copy of FID [0x200000401:0x2a:0x0] is
// ROOT/002a/0401/0x200000401:0x2a:0x0 (the low 16 bits of the object id,
// then of the sequence, spread the files over directories), with its
// SHA-256 beside it in the same name plus ".sha256". Copies are written to
// a temporary name, synced and renamed, so an archive that dies midway
// leaves no copy behind.
//
// As lhsmtool_posix does, the copytool also keeps a shadow namespace for
// people browsing the archive: ROOT/shadow/PATH, where PATH is the file's
// path in the file system when it was archived (fid2path), is a relative
// symlink to its archive copy. The copy's PATH is remembered beside it
// (".shadow"), so that archiving the file again under another name moves
// the link, and removing the copy removes it; a link that points to
// another FID's copy (a file since made under the same name) is left
// alone. The shadow tree is a view: failing to update it is logged, never
// fails an action.
package posix

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/internal/durable"
	"github.com/nacrefs/nacre/internal/fid"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
)

// chunk is the copy's unit.
const chunk = 1 << 20

// Config configures a Copytool.
type Config struct {
	// FS is the file system's client (as root); required.
	FS *client.FS
	// Root is the archive's directory; required.
	Root string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Copytool runs archive, restore, remove and release actions. Safe for
// concurrent use.
type Copytool struct {
	fs   *client.FS
	root string
	log  *slog.Logger
	// shadowMu serializes changes to the shadow tree (a directory made
	// for one link must not be pruned as empty before the link is in).
	shadowMu sync.Mutex
}

var _ hsm.Handler = (*Copytool)(nil)

// New returns a copytool archiving into cfg.Root (made if missing).
func New(cfg Config) (*Copytool, error) {
	if cfg.FS == nil || cfg.Root == "" {
		return nil, errors.New("posix: a file system and an archive root are required")
	}
	if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
		return nil, fmt.Errorf("posix: archive root: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Copytool{fs: cfg.FS, root: filepath.Clean(cfg.Root), log: cfg.Logger}, nil
}

// Path returns where f's archive copy lives.
func (ct *Copytool) Path(f fid.FID) string {
	name := strings.Trim(f.String(), "[]")
	return filepath.Join(ct.root, fmt.Sprintf("%04x", f.Oid&0xffff), fmt.Sprintf("%04x", f.Seq&0xffff), name)
}

// Handle runs one action.
func (ct *Copytool) Handle(ctx context.Context, a *hsmv1.Action, progress func(done, total uint64)) (string, error) {
	f := hsm.FIDFrom(a.Fid)
	switch a.Kind {
	case hsmv1.ActionKind_ACTION_KIND_ARCHIVE:
		return ct.Archive(ctx, f, a.ArchiveId, progress)
	case hsmv1.ActionKind_ACTION_KIND_RESTORE:
		return ct.Restore(ctx, f, progress)
	case hsmv1.ActionKind_ACTION_KIND_REMOVE:
		return "", ct.Remove(ctx, f)
	case hsmv1.ActionKind_ACTION_KIND_RELEASE:
		_, err := ct.fs.HSMRelease(ctx, client.Root(), f)
		return "", err
	}
	return "", fmt.Errorf("posix: action %v: %w", a.Kind, syscall.EINVAL)
}

// Archive copies f into the archive and records on the MDT that the copy
// holds the data version it was read at: EBUSY if the file changed while
// being copied, EPERM for NOARCHIVE, the MDT's errors (ENOENT, EINVAL for
// a directory).
func (ct *Copytool) Archive(ctx context.Context, f fid.FID, archiveID uint32, progress func(done, total uint64)) (string, error) {
	st, err := ct.fs.HSMState(ctx, client.Root(), f)
	if err != nil {
		return "", err
	}
	switch {
	case st.Flags&client.HSMNoArchive != 0:
		return "", fmt.Errorf("posix: archive %v: NOARCHIVE: %w", f, syscall.EPERM)
	case st.Flags&client.HSMReleased != 0:
		if st.Flags&client.HSMArchived != 0 && st.Flags&client.HSMDirty == 0 {
			return "", nil // its archive copy is current
		}
		return "", fmt.Errorf("posix: archive %v: released: %w", f, syscall.ENODATA)
	}
	src, _, err := ct.fs.Open(ctx, client.Root(), f, syscall.O_RDONLY)
	if err != nil {
		return "", err
	}
	defer src.Close(context.WithoutCancel(ctx))
	size, err := src.Size(ctx)
	if err != nil {
		return "", err
	}
	dst := ct.Path(f)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".archive-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	buf := make([]byte, chunk)
	for off := int64(0); off < size; {
		n, err := src.ReadAt(ctx, buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
			return "", fmt.Errorf("posix: archive %v: read at %d: %w", f, off, err)
		}
		if _, err := tmp.Write(buf[:n]); err != nil {
			return "", err
		}
		h.Write(buf[:n])
		off += int64(n)
		progress(uint64(off), uint64(size))
		if err := ctx.Err(); err != nil {
			return "", err
		}
	}
	if err := tmp.Sync(); err != nil {
		return "", err
	}
	after, err := ct.fs.HSMState(ctx, client.Root(), f)
	if err != nil {
		return "", err
	}
	if after.DataVersion != st.DataVersion {
		return "", fmt.Errorf("posix: archive %v: changed while copied (data version %d → %d): %w", f, st.DataVersion, after.DataVersion, syscall.EBUSY)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	// Canceled (the coordinator may give the file to another action once
	// this attempt ends), nothing goes under the final names.
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := durable.WriteFile(dst+".sha256", []byte(sum+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	// The copy's name, and the directories made for it, are durable
	// before the MDT hears of the copy: a release may destroy the file's
	// objects right after, and a power loss of the archive's host would
	// then leave the file's data nowhere.
	if err := ct.syncDirs(filepath.Dir(dst)); err != nil {
		return "", fmt.Errorf("posix: archive %v: %w", f, err)
	}
	ct.linkShadow(ctx, f)
	if _, err := ct.fs.HSMProgress(ctx, f, client.HSMActionArchive, archiveID, st.DataVersion); err != nil {
		return "", err
	}
	return sum, nil
}

// Restore copies f's archive copy back into new objects, checks it
// against the checksum taken at archive time, and records on the MDT that
// f is restored: ENOENT without an archive copy, EIO on a checksum
// mismatch, EINVAL if f is not released.
func (ct *Copytool) Restore(ctx context.Context, f fid.FID, progress func(done, total uint64)) (string, error) {
	p := ct.Path(f)
	src, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("posix: restore %v: no archive copy: %w", f, err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return "", err
	}
	// A copy without a checksum file (archived by another tool) is not
	// checked; one whose checksum cannot be read is not restored
	// unchecked.
	want, err := os.ReadFile(p + ".sha256")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("posix: restore %v: checksum: %w", f, err)
	}
	a, err := ct.fs.Getattr(ctx, client.Root(), f)
	if err != nil {
		return "", err
	}
	dst, err := ct.fs.OpenRestore(ctx, f)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if err := copyIn(ctx, dst, src, fi.Size(), h, progress); err != nil {
		dst.Close(context.WithoutCancel(ctx))
		return "", fmt.Errorf("posix: restore %v: %w", f, err)
	}
	if err := dst.Close(ctx); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if w := strings.TrimSpace(string(want)); w != "" && w != sum {
		return "", fmt.Errorf("posix: restore %v: checksum %s, archived %s: %w", f, sum, w, syscall.EIO)
	}
	// The restore's writes set mtime: put the file's back (AttrRestore:
	// also on an immutable or append-only file, still released now).
	if _, err := ct.fs.Setattr(ctx, client.Root(), f, client.SetAttr{Valid: mdc.AttrMtime | mdc.AttrAtime | mdc.AttrRestore, Mtime: a.Mtime, Atime: a.Atime}); err != nil {
		return "", err
	}
	if _, err := ct.fs.HSMProgress(ctx, f, client.HSMActionRestore, 0, 0); err != nil {
		return "", err
	}
	return sum, nil
}

func copyIn(ctx context.Context, dst *client.File, src io.Reader, size int64, h hash.Hash, progress func(done, total uint64)) error {
	buf := make([]byte, chunk)
	var off int64
	for {
		n, err := io.ReadFull(src, buf)
		if n > 0 {
			h.Write(buf[:n])
			wn, _, werr := dst.WriteAt(ctx, buf[:n], off)
			if werr != nil {
				return werr
			}
			if wn < n {
				// The file's layout cannot hold more (a write that
				// crosses its largest size is cut short): the copy
				// would lose the rest.
				return fmt.Errorf("restore: %d of %d bytes at %d written: %w", wn, n, off, syscall.EFBIG)
			}
			off += int64(n)
			progress(uint64(off), uint64(size))
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Remove deletes f's archive copy and its shadow link, and records it on
// the MDT: EBUSY for a released file (the copy is its only data). The
// copy of a file deleted from the file system (ENOENT on the MDT: the
// policy engine's remove_deleted) is deleted with nothing to record.
func (ct *Copytool) Remove(ctx context.Context, f fid.FID) error {
	st, err := ct.fs.HSMState(ctx, client.Root(), f)
	gone := errors.Is(err, syscall.ENOENT)
	switch {
	case err != nil && !gone:
		return err
	case !gone && st.Flags&client.HSMReleased != 0:
		return fmt.Errorf("posix: remove the archive copy of %v: released: %w", f, syscall.EBUSY)
	}
	if testHookRemoving != nil {
		testHookRemoving(f)
	}
	// The MDT hears of it before the copy goes: it refuses for a file
	// released since the check above (EBUSY), and a file no longer
	// archived cannot be released after; deleting first could leave a
	// released file with no copy.
	if !gone {
		if _, err := ct.fs.HSMProgress(ctx, f, client.HSMActionRemove, 0, 0); err != nil {
			return fmt.Errorf("posix: remove the archive copy of %v: %w", f, err)
		}
	}
	if err := ctx.Err(); err != nil { // canceled: the copy may be another action's now
		return err
	}
	p := ct.Path(f)
	ct.unlinkShadow(f)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("posix: remove the archive copy of %v: %w", f, err)
	}
	os.Remove(p + ".sha256")
	return nil
}

// syncDirs syncs dir and each directory above it up to the archive's
// root: entries made or renamed there, and directories MkdirAll made.
func (ct *Copytool) syncDirs(dir string) error {
	for {
		if err := durable.SyncDir(dir); err != nil {
			return fmt.Errorf("sync %s: %w", dir, err)
		}
		if dir == ct.root || !strings.HasPrefix(dir, ct.root+string(filepath.Separator)) {
			return nil
		}
		dir = filepath.Dir(dir)
	}
}

// testHookRemoving, if set (by tests), runs when Remove has found f not
// released, before it changes anything.
var testHookRemoving func(fid.FID)

// ShadowRoot is the shadow namespace's directory.
func (ct *Copytool) ShadowRoot() string { return filepath.Join(ct.root, "shadow") }

// shadowPath returns the shadow link of the file at fsPath ("/dir/file").
func (ct *Copytool) shadowPath(fsPath string) (string, error) {
	sr := ct.ShadowRoot()
	p := filepath.Join(sr, filepath.FromSlash(fsPath))
	if !strings.HasPrefix(p, sr+string(filepath.Separator)) {
		return "", fmt.Errorf("posix: shadow of %q: not a path below the root", fsPath)
	}
	return p, nil
}

// linkShadow points ROOT/shadow/PATH at f's archive copy, PATH being f's
// path now, and drops the link of the name it was archived under before.
func (ct *Copytool) linkShadow(ctx context.Context, f fid.FID) {
	paths, err := ct.fs.FID2Path(ctx, client.Root(), f)
	if err != nil || len(paths) == 0 {
		ct.log.Warn("posix: no shadow link: fid2path", "fid", f, "err", err)
		return
	}
	link, err := ct.shadowPath(paths[0])
	if err != nil {
		ct.log.Warn("posix: no shadow link", "fid", f, "err", err)
		return
	}
	copyPath := ct.Path(f)
	ct.shadowMu.Lock()
	defer ct.shadowMu.Unlock()
	if old, err := os.ReadFile(copyPath + ".shadow"); err == nil && string(old) != paths[0] {
		ct.dropShadowLocked(string(old), copyPath)
	}
	if err := replaceSymlink(link, copyPath); err != nil {
		ct.log.Warn("posix: no shadow link", "fid", f, "link", link, "err", err)
		return
	}
	if err := os.WriteFile(copyPath+".shadow", []byte(paths[0]), 0o644); err != nil {
		ct.log.Warn("posix: shadow link not remembered", "fid", f, "err", err)
	}
}

// replaceSymlink makes link a relative symlink to target, replacing
// whatever link was (atomically: a new link renamed over it). Another
// copytool sharing the archive may prune the directory it just made (as
// empty) before the link is in: it makes it again, a few times.
func replaceSymlink(link, target string) error {
	dir := filepath.Dir(link)
	rel, err := filepath.Rel(dir, target)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".shadow-"+filepath.Base(target))
	for try := 0; ; try++ {
		err := os.MkdirAll(dir, 0o755)
		if err == nil {
			os.Remove(tmp)
			if err = os.Symlink(rel, tmp); err == nil {
				if err = os.Rename(tmp, link); err != nil {
					os.Remove(tmp)
				}
			}
		}
		if err == nil || !errors.Is(err, os.ErrNotExist) || try == 3 {
			return err
		}
	}
}

// unlinkShadow removes f's shadow link and what remembers it.
func (ct *Copytool) unlinkShadow(f fid.FID) {
	copyPath := ct.Path(f)
	ct.shadowMu.Lock()
	defer ct.shadowMu.Unlock()
	if old, err := os.ReadFile(copyPath + ".shadow"); err == nil {
		ct.dropShadowLocked(string(old), copyPath)
	}
	os.Remove(copyPath + ".shadow")
}

// dropShadowLocked removes the shadow link of fsPath if it still points at
// copyPath, then the directories it leaves empty.
func (ct *Copytool) dropShadowLocked(fsPath, copyPath string) {
	link, err := ct.shadowPath(fsPath)
	if err != nil {
		return
	}
	target, err := os.Readlink(link)
	if err != nil || filepath.Join(filepath.Dir(link), target) != copyPath {
		return // gone, or another file's now
	}
	if err := os.Remove(link); err != nil {
		ct.log.Warn("posix: old shadow link stays", "link", link, "err", err)
		return
	}
	sr := ct.ShadowRoot()
	for dir := filepath.Dir(link); dir != sr && strings.HasPrefix(dir, sr); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty
		}
	}
}

package osdfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Snapshot copies the store into dir, which must not exist, as it is
// durable now: every transaction committed before the call is in the
// copy, none after. Transactions wait meanwhile. A Device opened on the
// copy is the store as it was then (an OST's replay barrier, for tests of
// recovery: a crash that lost every later change).
func (d *Device) Snapshot(ctx context.Context, dir string) error {
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		return d.errorf("snapshot: %s exists (%v)", dir, err)
	}
	if err := d.Sync(ctx); err != nil {
		return err
	}
	if err := d.enter(); err != nil { // not closed; then hold every call out
		return d.errorf("snapshot: %w", err)
	}
	d.exit()
	d.life.Lock()
	defer d.life.Unlock()
	// What committed since the Sync, durable and applied: the committer
	// is idle then, and no transaction runs, so the files hold still.
	d.jmu.Lock()
	target := d.jmu.nextLSN - 1
	d.jmu.Unlock()
	d.kickCommitter()
	if err := d.waitDurable(ctx, target); err != nil {
		return err
	}
	if err := copyTree(d.dir, dir); err != nil {
		os.RemoveAll(dir)
		return d.errorf("snapshot to %s: %w", dir, err)
	}
	return nil
}

// copyTree copies the directory tree src to dst: directories, regular
// files with their extended attributes (an object's lma), modes.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case e.IsDir():
			if err := os.Mkdir(to, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFile(p, to, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: not a file or directory (%v)", p, info.Mode())
		}
		return copyXattrs(p, to)
	})
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func copyXattrs(from, to string) error {
	size, err := unix.Llistxattr(from, nil)
	if err != nil || size == 0 {
		return err
	}
	names := make([]byte, size)
	if size, err = unix.Llistxattr(from, names); err != nil {
		return err
	}
	for name := range strings.SplitSeq(string(names[:size]), "\x00") {
		if name == "" {
			continue
		}
		n, err := unix.Lgetxattr(from, name, nil)
		if err != nil {
			return err
		}
		v := make([]byte, n)
		if n, err = unix.Lgetxattr(from, name, v); err != nil {
			return err
		}
		if err := unix.Lsetxattr(to, name, v[:n], 0); err != nil {
			return fmt.Errorf("%s: xattr %s: %w", to, name, err)
		}
	}
	return nil
}

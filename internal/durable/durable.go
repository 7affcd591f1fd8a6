// Package durable writes files that survive a crash of the machine: their
// data on disk before their name points at it.
package durable

import (
	"os"
	"path/filepath"
)

// WriteFile writes data to path with permissions perm, whole or not at
// all: into a temporary file beside it, synced, then renamed over path.
// The rename is durable once the caller syncs path's directory (SyncDir),
// which it may do once for several files.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // (gone already once renamed)
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// SyncDir makes the entries of directory dir durable: files created,
// renamed or removed in it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

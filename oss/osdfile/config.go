package osdfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nacrefs/nacre/internal/durable"
	"github.com/nacrefs/nacre/oss/osd"
)

// Names inside a target directory.
const (
	confName    = "nacre-osd.json" // the target's identity, written last by Format
	journalName = "journal"        // the preallocated journal
	objectsDir  = "O"              // object files: O/<seq hex>/d<oid%32>/<oid hex>
	confMagic   = "nacre-osd-file"
	confVersion = 1
)

// Journal size bounds and default.
const (
	MinJournalSize     = 1 << 20
	MaxJournalSize     = 4 << 30
	DefaultJournalSize = 64 << 20
)

// FormatConfig is what Format writes into a new target.
type FormatConfig struct {
	// Label names the target ("nacre-OST0000"): 1 to 64 bytes of letters,
	// digits, '-', '_' and '.'.
	Label string
	// JournalSize is the size of the preallocated journal file, between
	// MinJournalSize and MaxJournalSize, or 0 to size it after the store
	// as mkfs.ext4 does: 1/32 of the file system under the target, at
	// least MinJournalSize and at most DefaultJournalSize. A commit never
	// needs more space than the journal holds, so a full store cannot stop
	// the journal; a larger journal means rarer checkpoints and longer
	// replays.
	JournalSize int64
}

// DefaultFormatConfig returns the defaults for a target named label: the
// journal sized after the store.
func DefaultFormatConfig(label string) FormatConfig {
	return FormatConfig{Label: label}
}

// autoJournalSize sizes a journal after the file system under dir.
func autoJournalSize(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	bsize := st.Frsize
	if bsize == 0 {
		bsize = st.Bsize
	}
	size := int64(st.Blocks) * bsize / 32 &^ (1<<20 - 1)
	return min(max(size, MinJournalSize), DefaultJournalSize), nil
}

// Validate reports what is wrong with c, wrapping osd.ErrInvalid.
func (c FormatConfig) Validate() error {
	if len(c.Label) == 0 || len(c.Label) > 64 {
		return fmt.Errorf("%w: label %q: want 1 to 64 bytes", osd.ErrInvalid, c.Label)
	}
	for _, r := range c.Label {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%w: label %q: only letters, digits, '-', '_' and '.'", osd.ErrInvalid, c.Label)
		}
	}
	if c.JournalSize != 0 && (c.JournalSize < MinJournalSize || c.JournalSize > MaxJournalSize) {
		return fmt.Errorf("%w: journal size %d: want %d to %d bytes", osd.ErrInvalid, c.JournalSize, MinJournalSize, MaxJournalSize)
	}
	return nil
}

// Config tunes an open device.
type Config struct {
	// MaxCachedObjects bounds the objects kept open in memory (each holds
	// a file descriptor) when nobody uses them. Objects in use or with
	// changes not yet applied to their files do not count against it.
	MaxCachedObjects int
	// SyncWorkers is how many data files the committer fsyncs at once.
	SyncWorkers int
	// DirectWriteMin is the size from which a bulk write goes to its file
	// with O_DIRECT, around the page cache (Lustre's
	// writethrough_max_io_mb); 0, the default, sends every write through
	// the page cache. On a store whose direct writes are slow to complete
	// (ext4 serializes those that extend a file, and a virtual disk adds
	// its latency to each) the page cache's background writeback keeps
	// the disk busier than the OST's handlers can; where direct writes
	// are quick, setting it (osd-file.*.direct_write_min_kb) saves the
	// copy into the page cache.
	DirectWriteMin int
	// DirectReadMin is the size from which a bulk read of a range the
	// page cache holds none of reads its block-aligned part with
	// O_DIRECT (osd-file.*.direct_read_min_kb), as Lustre's
	// read_cache_enable=0 keeps bulk reads out of the OSS's page cache;
	// 0, the default, reads everything through it. A direct read has the
	// disk put the bytes in the bulk buffer itself, sparing the OSS the
	// page cache's allocation and copy, and leaves the cache to data read
	// again; but it forgoes the kernel's read-ahead, so each read waits
	// for the disk, and the checksum then reads the bytes from memory
	// rather than from the processor's cache. On this project's test
	// machine (a virtual disk, two cores) it saved 8% of the OSS's
	// processor time and lost 4% (one reader) to 17% (four) of the
	// throughput of FUSE sequential reads.
	DirectReadMin int
	// LazyObjects bounds the objects that exist without a file (created
	// and not written yet, see lazy.go); 0 makes every object's file at
	// its create. A checkpoint makes the files of the lazy objects it
	// finds, so the bound is also what one checkpoint may have to create
	// (the precreated pool of an OST is up to 1024 objects, which an
	// MDT takes from as files are made).
	LazyObjects int
	// Logger receives the device's log lines; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{MaxCachedObjects: 4096, SyncWorkers: 8, DirectWriteMin: 0, DirectReadMin: 0, LazyObjects: 4096}
}

// Validate reports what is wrong with c, wrapping osd.ErrInvalid.
func (c Config) Validate() error {
	if c.MaxCachedObjects < 1 {
		return fmt.Errorf("%w: MaxCachedObjects %d: want at least 1", osd.ErrInvalid, c.MaxCachedObjects)
	}
	if c.SyncWorkers < 1 || c.SyncWorkers > 256 {
		return fmt.Errorf("%w: SyncWorkers %d: want 1 to 256", osd.ErrInvalid, c.SyncWorkers)
	}
	if c.LazyObjects < 0 {
		return fmt.Errorf("%w: LazyObjects %d: want 0 or more", osd.ErrInvalid, c.LazyObjects)
	}
	if c.DirectWriteMin < 0 {
		return fmt.Errorf("%w: DirectWriteMin %d: want 0 or more", osd.ErrInvalid, c.DirectWriteMin)
	}
	if c.DirectReadMin < 0 {
		return fmt.Errorf("%w: DirectReadMin %d: want 0 or more", osd.ErrInvalid, c.DirectReadMin)
	}
	return nil
}

// targetConf is the target's identity file, JSON so an administrator can read
// it.
type targetConf struct {
	Magic       string `json:"magic"`
	Version     int    `json:"version"`
	Label       string `json:"label"`
	JournalSize int64  `json:"journal_size"`
	// Xattr is the extended attribute holding each object's identity
	// and attributes: user.nacre.lma where the store allows user
	// xattrs, else trusted.nacre.lma (root only).
	Xattr string `json:"xattr"`
}

var xattrCandidates = []string{"user.nacre.lma", "trusted.nacre.lma"}

// Format makes dir a new, empty osd-file target. dir must be an empty
// directory (it is created if missing) on a file system that supports
// extended attributes, sparse files and fallocate. On error dir may hold a
// partial format, never mistaken for a target: the identity file is
// written last.
func Format(ctx context.Context, dir string, cfg FormatConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("osd-file format %s: %w", dir, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	wrap := func(what string, err error) error {
		return fmt.Errorf("osd-file format %s: %s: %w", dir, what, ioErr(err))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return wrap("create directory", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return wrap("read directory", err)
	}
	if len(ents) != 0 {
		return fmt.Errorf("osd-file format %s: %w: directory is not empty (%d entries, first %q)", dir, osd.ErrInvalid, len(ents), ents[0].Name())
	}
	if cfg.JournalSize == 0 {
		if cfg.JournalSize, err = autoJournalSize(dir); err != nil {
			return wrap("size the journal", err)
		}
	}
	xattr, err := probeXattr(dir)
	if err != nil {
		return wrap("probe extended attributes", err)
	}
	if err := os.Mkdir(filepath.Join(dir, objectsDir), 0o755); err != nil {
		return wrap("create "+objectsDir, err)
	}
	if err := createJournal(filepath.Join(dir, journalName), cfg.JournalSize); err != nil {
		return wrap("create journal", err)
	}
	conf, err := json.MarshalIndent(targetConf{
		Magic: confMagic, Version: confVersion, Label: cfg.Label, JournalSize: cfg.JournalSize, Xattr: xattr,
	}, "", "  ")
	if err != nil {
		return wrap("encode identity", err)
	}
	if err := durable.WriteFile(filepath.Join(dir, confName), append(conf, '\n'), 0o644); err != nil {
		return wrap("write identity", err)
	}
	if err := durable.SyncDir(dir); err != nil {
		return wrap("sync directory", err)
	}
	return nil
}

// probeXattr finds which lma attribute name the file system under dir takes.
func probeXattr(dir string) (string, error) {
	p := filepath.Join(dir, ".xattr-probe")
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	defer os.Remove(p)
	defer f.Close()
	var errs []error
	for _, name := range xattrCandidates {
		err := unix.Fsetxattr(int(f.Fd()), name, make([]byte, lmaSize), 0)
		if err == nil {
			return name, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	return "", fmt.Errorf("the file system takes neither extended attribute: %w", errors.Join(errs...))
}

func createJournal(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := ignoreEINTR(func() error { return unix.Fallocate(fd, 0, 0, size) }); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return err
		}
		// No fallocate: write the zeros, so the blocks are there.
		zero := make([]byte, 1<<20)
		for off := int64(0); off < size; off += int64(len(zero)) {
			if err := pwriteFull(fd, zero[:min(int64(len(zero)), size-off)], off); err != nil {
				return err
			}
		}
	}
	// Generation g's header lives in slot g%2: the first checkpoint
	// writes generation 2 into the other slot, so a torn write of it
	// leaves this one in force.
	h := jheader{gen: 1, startLSN: 1, size: uint64(size)}
	if err := pwriteFull(fd, h.encode(), int64(h.gen%2)*slotSize); err != nil {
		return err
	}
	return f.Sync()
}

func readConf(dir string) (targetConf, error) {
	var c targetConf
	b, err := os.ReadFile(filepath.Join(dir, confName))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return c, fmt.Errorf("%w: %s is not an osd-file target (no %s; run Format first)", osd.ErrInvalid, dir, confName)
		}
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: %s: %v", osd.ErrCorrupt, confName, err)
	}
	if c.Magic != confMagic || c.Version != confVersion {
		return c, fmt.Errorf("%w: %s: magic %q version %d, want %q version %d", osd.ErrCorrupt, confName, c.Magic, c.Version, confMagic, confVersion)
	}
	fc := FormatConfig{Label: c.Label, JournalSize: c.JournalSize}
	if err := fc.Validate(); err != nil {
		return c, fmt.Errorf("%w: %s: %v", osd.ErrCorrupt, confName, err)
	}
	if c.JournalSize == 0 {
		return c, fmt.Errorf("%w: %s: no journal size", osd.ErrCorrupt, confName)
	}
	if c.Xattr != xattrCandidates[0] && c.Xattr != xattrCandidates[1] {
		return c, fmt.Errorf("%w: %s: xattr %q", osd.ErrCorrupt, confName, c.Xattr)
	}
	return c, nil
}

package posix_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/ext4img"
)

// TestArchiveSurvivesPowerLoss: an archive copy the MDT was told of (so
// that the file may be released, its objects destroyed) is durable under
// its final name, with its checksum, whatever happens to the archive's
// host next. The copy was synced but not the rename, the checksum file,
// nor the directories made for it: after a power loss within ext4's
// commit interval the archive held only the temporary copy, and the
// released file's data was nowhere. The archive is on an ext4 image.
func TestArchiveSurvivesPowerLoss(t *testing.T) {
	disk := ext4img.New(t, "64M")
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	user := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ct, err := posixNew(c.Mount(1), filepath.Join(disk.Dir(), "archive"))
	if err != nil {
		t.Fatal(err)
	}
	const size = 300 << 10
	f := makeFiles(t, ctx, user, "p", 1, size)[0]
	sum, err := ct.Archive(ctx, f, 1, func(uint64, uint64) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := user.HSMRelease(ctx, client.Root(), f); err != nil {
		t.Fatal(err)
	}
	crash := disk.Crash() // the archive's host loses power
	rel, err := filepath.Rel(disk.Dir(), ct.Path(f))
	if err != nil {
		t.Fatal(err)
	}
	disk.Unmount()

	after := ext4img.Mount(t, crash)
	got, err := os.ReadFile(filepath.Join(after.Dir(), rel))
	if err != nil || !bytes.Equal(got, fileBytes(size)) {
		t.Errorf("the archive copy of released file %v after a power loss: %d bytes, %v", f, len(got), err)
	}
	if s, err := os.ReadFile(filepath.Join(after.Dir(), rel+".sha256")); err != nil || strings.TrimSpace(string(s)) != sum {
		t.Errorf("its checksum after a power loss: %q, %v; want %s", s, err, sum)
	}
}

// TestRestoreRefusesUnreadableChecksum: a restore whose checksum file
// cannot be read fails rather than restore the copy unchecked: a damaged
// copy came back as the file's data. (A copy without a checksum file is
// restored unchecked, as another tool's copies are.)
func TestRestoreRefusesUnreadableChecksum(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1})
	user := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ct, err := posixNew(c.Mount(1), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := makeFiles(t, ctx, user, "u", 1, 5000)[0]
	if _, err := ct.Archive(ctx, f, 1, func(uint64, uint64) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := user.HSMRelease(ctx, client.Root(), f); err != nil {
		t.Fatal(err)
	}
	p := ct.Path(f)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1 // the copy damaged
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p + ".sha256"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p+".sha256", 0o755); err != nil { // and its checksum unreadable
		t.Fatal(err)
	}
	if _, err := ct.Restore(ctx, f, func(uint64, uint64) {}); err == nil {
		t.Fatal("a damaged copy whose checksum could not be read was restored")
	}
}

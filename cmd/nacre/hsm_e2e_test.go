package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/clustertest"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
	"github.com/nacrefs/nacre/services/hsm/hsmtest"
)

// lfsBin runs the nacre binary as lfs (through a symlink of that name, as
// Lustre's tools are installed) and returns its stdout and stderr.
func lfsBin(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	link := filepath.Join(filepath.Dir(nacreBin), "lfs")
	if _, err := os.Lstat(link); err != nil {
		if err := os.Symlink(nacreBin, link); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, link, args...)
	cmd.Env = append(os.Environ(), "NACRE_SOURCE=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

func mustLfsBin(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := lfsBin(t, args...)
	if err != nil {
		t.Fatalf("lfs %s: %v\n%s%s", strings.Join(args[:1], " "), err, out, stderr)
	}
	return out
}

// ostUsedKiB sums the Used column of the OST rows of lfs df on mnt.
func ostUsedKiB(t *testing.T, mnt string) int64 {
	t.Helper()
	out := mustLfsBin(t, "df", mnt)
	ms := regexp.MustCompile(`(?m)^nacre-OST\d{4}_UUID +\d+ +(\d+) `).FindAllStringSubmatch(out, -1)
	if len(ms) == 0 {
		t.Fatalf("lfs df: no OST row:\n%s", out)
	}
	var n int64
	for _, m := range ms {
		u, _ := strconv.ParseInt(m[1], 10, 64)
		n += u
	}
	return n
}

// TestHSMFUSEEndToEnd is issue 10's end to end on a FUSE mount: two
// copytool agents serve the MGS's coordinator; 200 files of 0 bytes to 3
// MiB written through the mount are archived (lfs hsm_archive on the
// mount), released (lfs hsm_release), which returns their space on the
// OSTs, and read back through the mount byte for byte (each open restores
// its file); a file written after its archive is dirty and lfs
// hsm_release refuses it; lfs hsm_state, the real binary run as lfs, shows
// Lustre's words at every step; the archive's shadow namespace leads to
// every copy.
func TestHSMFUSEEndToEnd(t *testing.T) {
	const nFiles = 200
	// Each OST on a tmpfs of its own, so that lfs df shows its data
	// alone, not the host's whole disk.
	c := clustertest.Start(t, clustertest.Options{OSTs: 2, OSTTmpfs: 256 << 20})
	srv := fuseMountServer(t, c, 0)
	mnt := srv.Dir()
	hc, err := hsm.NewClient([]string{c.MGS})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	srv.FS().SetHSMRestorer(hc) // as nacre mount does
	defer srv.FS().SetHSMRestorer(nil)
	archive := t.TempDir()
	hsmtest.StartAgent(t, c.Mount(1), []string{c.MGS}, "agent-a", archive, nil)
	hsmtest.StartAgent(t, c.Mount(2), []string{c.MGS}, "agent-b", archive, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 200 files, 0 bytes to 3 MiB, about 40 MiB in all.
	dir := filepath.Join(mnt, "hsm")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(10, 20))
	sizes := []int{0, 1, 4095, 4096, 65537, 128<<10 + 5, 300 << 10, 768<<10 + 3}
	paths := make([]string, nFiles)
	data := map[string][]byte{}
	var total int64
	start := time.Now()
	for i := range nFiles {
		size := sizes[i%len(sizes)] + rng.IntN(1000)*(i%3)
		if i%50 == 49 {
			size = 3<<20 + i
		}
		b := make([]byte, size)
		rand.NewChaCha8([32]byte{byte(i), byte(i >> 8)}).Read(b)
		paths[i] = filepath.Join(dir, fmt.Sprintf("f%03d", i))
		if err := os.WriteFile(paths[i], b, 0o644); err != nil {
			t.Fatal(err)
		}
		data[paths[i]] = b
		total += int64(size)
	}
	t.Logf("wrote %d files, %d bytes, through the mount in %v", nFiles, total, time.Since(start))

	// states checks lfs hsm_state's line for every file.
	states := func(step string, want func(p string) string) {
		t.Helper()
		out := mustLfsBin(t, append([]string{"hsm_state"}, paths...)...)
		var b strings.Builder
		for _, p := range paths {
			b.WriteString(p + ": " + want(p) + "\n")
		}
		if out != b.String() {
			got, exp := strings.Split(out, "\n"), strings.Split(b.String(), "\n")
			for i := range min(len(got), len(exp)) {
				if got[i] != exp[i] {
					t.Fatalf("%s: lfs hsm_state line %d:\n got %q\nwant %q", step, i, got[i], exp[i])
				}
			}
			t.Fatalf("%s: lfs hsm_state: %d lines, want %d", step, len(got), len(exp))
		}
	}
	const (
		none     = "(0x00000000)"
		archived = "(0x00000009) exists archived, archive_id:1"
		dirty    = "(0x0000000b) exists dirty archived, archive_id:1"
		released = "(0x0000000d) exists released archived, archive_id:1"
	)
	states("new", func(string) string { return none })

	// Archive through the mount; both agents take a share.
	start = time.Now()
	mustLfsBin(t, append([]string{"hsm_archive", "--archive", "1", "--wait"}, paths...)...)
	t.Logf("archived in %v", time.Since(start))
	acts, err := hc.ListActions(ctx, &hsmv1.ListActionsRequest{Kind: hsmv1.ActionKind_ACTION_KIND_ARCHIVE})
	if err != nil {
		t.Fatal(err)
	}
	byAgent := map[string]int{}
	for _, a := range acts {
		if a.State != hsmv1.ActionState_ACTION_STATE_SUCCEED {
			t.Fatalf("archive action %d: %v %s", a.Id, a.State, a.Error)
		}
		byAgent[a.Agent]++
	}
	if len(acts) != nFiles || byAgent["agent-a"] == 0 || byAgent["agent-b"] == 0 {
		t.Fatalf("%d archive actions, by agent %v", len(acts), byAgent)
	}
	t.Logf("archive actions by agent: %v", byAgent)
	states("archived", func(string) string { return archived })
	// The copytools' shadow namespace: ARCHIVE/shadow/hsm/fNNN leads to
	// each file's archive copy.
	for _, p := range paths {
		shadow := filepath.Join(archive, "shadow", "hsm", filepath.Base(p))
		if got, err := os.ReadFile(shadow); err != nil || !bytes.Equal(got, data[p]) {
			t.Fatalf("shadow %s: %d bytes, %v; want the %d archived", shadow, len(got), err, len(data[p]))
		}
	}

	// Written after its archive: dirty, and hsm_release refuses it.
	dirtyPath := paths[7]
	f, err := os.OpenFile(dirtyPath, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("changed"), 10); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	copy(data[dirtyPath][10:], "changed")
	if out, stderr, err := lfsBin(t, "hsm_release", dirtyPath); err == nil || !strings.Contains(stderr, "device or resource busy") {
		t.Fatalf("lfs hsm_release of a dirty file: %v\n%s%s", err, out, stderr)
	}
	isDirty := func(p string) bool { return p == dirtyPath }
	states("dirty", func(p string) string {
		if isDirty(p) {
			return dirty
		}
		return archived
	})

	// Release the others: their space comes back on the OSTs.
	var toRelease []string
	var releasedBytes int64
	for _, p := range paths {
		if !isDirty(p) {
			toRelease = append(toRelease, p)
			releasedBytes += int64(len(data[p]))
		}
	}
	objBefore, usedBefore := c.OSTObjectBytes(), ostUsedKiB(t, mnt)
	if objBefore < total*9/10 {
		t.Fatalf("the OSTs hold %d bytes of objects, %d written", objBefore, total)
	}
	mustLfsBin(t, append([]string{"hsm_release"}, toRelease...)...)
	states("released", func(p string) string {
		if isDirty(p) {
			return dirty
		}
		return released
	})
	for _, p := range paths {
		if fi, err := os.Stat(p); err != nil || fi.Size() != int64(len(data[p])) {
			t.Fatalf("stat %s after release: %v, want size %d", p, err, len(data[p]))
		}
	}
	// The object files go (the OSTs destroy them in the background), and
	// lfs df shows the space come back: the OSTs' used space (their rows
	// summed) drops by about the data released.
	var objAfter, usedAfter int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		objAfter, usedAfter = c.OSTObjectBytes(), ostUsedKiB(t, mnt)
		if objBefore-objAfter >= releasedBytes*9/10 && (usedBefore-usedAfter)*1024 >= releasedBytes*9/10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("space not returned after releasing %d bytes: objects %d -> %d bytes, lfs df OSTs used %d -> %d KiB",
				releasedBytes, objBefore, objAfter, usedBefore, usedAfter)
		}
	}
	t.Logf("released %d bytes: objects %d -> %d bytes, lfs df OSTs used %d -> %d KiB", releasedBytes, objBefore, objAfter, usedBefore, usedAfter)

	// Read back through the mount: each open restores its file.
	start = time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan error, len(paths))
	for _, p := range paths {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			got, err := os.ReadFile(p)
			switch {
			case err != nil:
				errs <- err
			case !bytes.Equal(got, data[p]):
				errs <- fmt.Errorf("%s: read back %d bytes, want %d (equal: %v)", p, len(got), len(data[p]), bytes.Equal(got, data[p]))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		failed, _ := hc.ListActions(ctx, &hsmv1.ListActionsRequest{States: []hsmv1.ActionState{hsmv1.ActionState_ACTION_STATE_FAILED}})
		for _, a := range failed {
			t.Logf("failed: action %d %v %v agent %s attempts %d: %s", a.Id, a.Kind, hsm.FIDFrom(a.Fid), a.Agent, a.Attempts, a.Error)
		}
		t.FailNow()
	}
	t.Logf("read back %d files through the mount in %v", nFiles, time.Since(start))
	states("restored", func(p string) string {
		if isDirty(p) {
			return dirty
		}
		return archived
	})
	st, err := hc.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].ArchiveId != 1 || st[0].BytesArchived != uint64(total) || st[0].BytesRestored != uint64(releasedBytes) || st[0].Failed != 0 {
		t.Fatalf("statistics %v, want %d bytes archived, %d restored", st, total, releasedBytes)
	}

	// Bad input through the mount: clear errors, state unchanged.
	if _, stderr, err := lfsBin(t, "hsm_archive", dir); err == nil || !strings.Contains(stderr, "invalid argument") {
		t.Fatalf("lfs hsm_archive of a directory: %v %s", err, stderr)
	}
	never := filepath.Join(dir, "never")
	if err := os.WriteFile(never, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := lfsBin(t, "hsm_release", never); err == nil || !strings.Contains(stderr, "operation not permitted") {
		t.Fatalf("lfs hsm_release of a never-archived file: %v %s", err, stderr)
	}
	if out := mustLfsBin(t, "hsm_state", never); out != never+": "+none+"\n" {
		t.Fatalf("never-archived file after a refused release: %q", out)
	}
	if _, stderr, err := lfsBin(t, "hsm_state", t.TempDir()); err == nil || !strings.Contains(stderr, "not on a Nacre mount") {
		t.Fatalf("lfs hsm_state off a mount: %v %s", err, stderr)
	}
}

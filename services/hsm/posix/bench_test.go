package posix_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/fid"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
)

// BenchmarkHSM: archive and restore throughput with 1 and 4 agents, and
// in the same run the baseline: a plain copy of the same files between
// the same places (read through the library into a local directory, and
// back into new files), one file after another as cp does.
func BenchmarkHSM(b *testing.B) {
	const nFiles, size = 32, 1 << 20
	for _, agents := range []int{1, 4} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) {
			c := clustertest.Start(b, clustertest.Options{OSTs: 2, Clients: 6})
			user := c.Mount(0)
			_, addrs := startCoordinators(b, 1, time.Minute)
			archive := b.TempDir()
			for i := range agents {
				startAgent(b, c.Mount(1+i), addrs, fmt.Sprintf("agent-%d", i), archive, nil)
			}
			hc, err := hsm.NewClient(addrs)
			if err != nil {
				b.Fatal(err)
			}
			defer hc.Close()
			ctx := context.Background()
			total := float64(nFiles * size)
			var archiveS, restoreS, cpOutS, cpInS time.Duration
			for it := 0; it < b.N; it++ {
				fids := makeFiles(b, ctx, user, fmt.Sprintf("b%d-", it), nFiles, size)

				// Baseline: cp out and back.
				dir := b.TempDir()
				start := time.Now()
				for i, f := range fids {
					copyOut(b, ctx, user, f, filepath.Join(dir, fmt.Sprint(i)))
				}
				cpOutS += time.Since(start)
				start = time.Now()
				for i := range fids {
					copyBack(b, ctx, user, filepath.Join(dir, fmt.Sprint(i)), fmt.Sprintf("cp%d-%d", it, i))
				}
				cpInS += time.Since(start)

				start = time.Now()
				ids, err := hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, 1, fids...)
				if err != nil {
					b.Fatal(err)
				}
				waitAll(b, ctx, hc, ids)
				archiveS += time.Since(start)
				for _, f := range fids {
					if _, err := user.HSMRelease(ctx, client.Root(), f); err != nil {
						b.Fatal(err)
					}
				}
				start = time.Now()
				if ids, err = hc.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_RESTORE, 1, fids...); err != nil {
					b.Fatal(err)
				}
				waitAll(b, ctx, hc, ids)
				restoreS += time.Since(start)
			}
			n := float64(b.N)
			mbps := func(d time.Duration) float64 { return total * n / d.Seconds() / (1 << 20) }
			b.ReportMetric(mbps(archiveS), "archive-MB/s")
			b.ReportMetric(mbps(restoreS), "restore-MB/s")
			b.ReportMetric(mbps(cpOutS), "cp-out-MB/s")
			b.ReportMetric(mbps(cpInS), "cp-in-MB/s")
			b.ReportMetric(cpOutS.Seconds()/archiveS.Seconds(), "archive-x-vs-cp")
			b.ReportMetric(cpInS.Seconds()/restoreS.Seconds(), "restore-x-vs-cp")
		})
	}
}

func copyOut(b testing.TB, ctx context.Context, fsys *client.FS, f fid.FID, dst string) {
	src, a, err := fsys.Open(ctx, client.Root(), f, syscall.O_RDONLY)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close(ctx)
	buf := make([]byte, a.Size)
	if n, err := src.ReadAt(ctx, buf, 0); err != nil && err != io.EOF || n != len(buf) {
		b.Fatal(n, err)
	}
	if err := os.WriteFile(dst, buf, 0o644); err != nil {
		b.Fatal(err)
	}
}

func copyBack(b testing.TB, ctx context.Context, fsys *client.FS, src, name string) {
	data, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	f, _, err := fsys.Create(ctx, client.Root(), fsys.Root(), name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o644, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := f.WriteAt(ctx, data, 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

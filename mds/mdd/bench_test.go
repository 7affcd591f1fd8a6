package mdd

import (
	"fmt"
	"testing"

	"github.com/nacrefs/nacre/internal/fid"
)

// BenchmarkNamespace measures Create, Getattr and Unlink in one directory,
// each reported as ops/s; batches are applied without fsync, with a Sync
// every 1000 operations as the background syncer would.
func BenchmarkNamespace(b *testing.B) {
	s, err := Open(testConfig(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	d, _ := s.Mkdir(root, RootFID, "d", Spec{Mode: 0o755})
	u := user(1000, 1000)
	s.Setattr(root, d.FID, SetAttr{Valid: AttrMode, Mode: 0o777})
	// FIDs come from a client's sequence, as the MDT's creates do.
	fids := NewFIDAllocator(1<<17, s.AllocClientSeq)
	runs := 0 // -count reruns Create on the same store: new names each time
	b.Run("Create", func(b *testing.B) {
		runs++
		i := 0
		for b.Loop() {
			f, err := fids.Next()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Create(u, d.FID, fmt.Sprintf("c%d.%d", runs, i), Spec{FID: f, Mode: 0o644, Layout: striped(uint32(i))}); err != nil {
				b.Fatal(err)
			}
			if i++; i%1000 == 0 {
				s.Sync()
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
	})
	var made []fid.FID
	for i := range 10000 {
		a, _ := s.Create(u, d.FID, fmt.Sprintf("g%d", i), Spec{Mode: 0o644})
		made = append(made, a.FID)
	}
	b.Run("Getattr", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := s.Getattr(made[i%len(made)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "getattrs/s")
	})
	b.Run("Lookup", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := s.Lookup(u, d.FID, fmt.Sprintf("g%d", i%len(made))); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	})
	b.Run("Unlink", func(b *testing.B) {
		for i := 0; i < b.N; i++ { // make what to unlink, outside the timing
			b.StopTimer()
			name := fmt.Sprintf("u%d", i)
			s.Create(u, d.FID, name, Spec{Mode: 0o644, Layout: striped(uint32(i))})
			b.StartTimer()
			if _, err := s.Unlink(u, d.FID, name); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "unlinks/s")
	})
}

package layout

import (
	"bytes"
	"errors"
	"testing"
)

// Layouts arrive from the network and from disk: Unmarshal must refuse junk
// with ErrCorrupt and never panic, what it accepts must be valid, encode
// back to the same bytes, and be safe to Map, size and truncate.
func FuzzUnmarshal(f *testing.F) {
	for _, l := range []Layout{plain(1, MiB), plain(4, 64*KiB), pfl()} {
		b, _ := l.Marshal()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Unmarshal(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("decoded an invalid layout: %v", err)
		}
		again, err := l.Marshal()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs (%v)", err)
		}
		_, _ = l.Map(12345, 10*MiB)
		_, _ = l.Truncate(3*MiB + 7)
		sizes := make([][]uint64, len(l.Components))
		for i := range l.Components {
			sizes[i] = make([]uint64, len(l.Components[i].Objects))
			for j := range sizes[i] {
				sizes[i][j] = uint64(j) * 12345
			}
		}
		if _, err := l.FileSize(sizes); err != nil {
			t.Fatal(err)
		}
	})
}

package iovec

import (
	"bytes"
	"testing"
)

func TestSlice(t *testing.T) {
	backing := []byte("abcdefghijklmnopqrstuvwxyz")
	bufs := [][]byte{backing[:3], backing[3:3], backing[3:10], backing[10:11], backing[11:]}
	for off := 0; off <= len(backing); off++ {
		for n := 0; off+n <= len(backing); n++ {
			v := Slice(bufs, off, n)
			if got := bytes.Join(v, nil); string(got) != string(backing[off:off+n]) {
				t.Fatalf("Slice(%d, %d) = %q", off, n, got)
			}
			if Len(v) != n {
				t.Fatalf("Len(Slice(%d, %d)) = %d", off, n, Len(v))
			}
			for _, b := range v {
				if len(b) == 0 || cap(b) != len(b) {
					t.Fatalf("Slice(%d, %d): view of len %d cap %d", off, n, len(b), cap(b))
				}
			}
		}
	}
	// Views alias the buffers: no copy.
	v := Slice(bufs, 4, 1)
	v[0][0] = 'E'
	if backing[4] != 'E' {
		t.Fatal("Slice copied")
	}
	// A vector of capped, non-empty views is its own whole slice.
	w := [][]byte{[]byte("ab")[:2:2], []byte("c")[:1:1]}
	if got := Slice(w, 0, 3); &got[0] != &w[0] {
		t.Errorf("Slice of the whole of a capped vector made new views")
	}
}

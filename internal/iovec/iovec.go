// Package iovec handles byte vectors: the [][]byte views of buffers that
// LNet, PtlRPC and the OSDs move data through without copying it.
package iovec

// Len returns the total length of v.
func Len(v [][]byte) int {
	n := 0
	for _, b := range v {
		n += len(b)
	}
	return n
}

// Slice returns views of n bytes of v starting at off, without copying;
// off+n must be within Len(v). Each view's capacity ends with it, so an
// append cannot write past it.
func Slice(v [][]byte, off, n int) [][]byte {
	if n == 0 {
		return nil
	}
	if off == 0 && n == ownViews(v) {
		return v // the whole vector, as most are: no new slice
	}
	var out [][]byte
	for _, b := range v {
		if off >= len(b) {
			off -= len(b)
			continue
		}
		b = b[off:]
		off = 0
		if len(b) >= n {
			return append(out, b[:n:n])
		}
		out = append(out, b[:len(b):len(b)])
		n -= len(b)
	}
	return out
}

// ownViews returns the total length of v if it can serve as its own views
// (none empty, none with capacity past its length), else -1.
func ownViews(v [][]byte) int {
	n := 0
	for _, b := range v {
		if len(b) == 0 || cap(b) != len(b) {
			return -1
		}
		n += len(b)
	}
	return n
}

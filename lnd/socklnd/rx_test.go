package socklnd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/nacrefs/nacre/lnet/wire"
)

// chunkReader hands out its data a few bytes per Read, as a socket does,
// with the sizes taken in turn from chunks; with eofEarly the last bytes
// come with io.EOF, as some readers return them.
type chunkReader struct {
	data     []byte
	chunks   []byte
	i        int
	eofEarly bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := 1
	if len(r.chunks) > 0 {
		k = int(r.chunks[r.i%len(r.chunks)])*37 + 1 // up to ~9 KiB: past the buffer
		r.i++
	}
	k = copy(p[:min(len(p), k)], r.data)
	r.data = r.data[k:]
	if len(r.data) == 0 && r.eofEarly {
		return k, io.EOF
	}
	return k, nil
}

// frame is how the framing test reads a stream: each "header" is
// wire.HeaderSize bytes whose first bytes say how long the payload after
// it is, how much of it to keep, and how to split the views it lands in.
type frame struct {
	n, mlen int
	split   int // the first view's length; the second gets the rest
}

func frameOf(hdr []byte) frame {
	n := int(binary.LittleEndian.Uint16(hdr)) % 9000 // some payloads outgrow the buffer
	mlen := n * int(hdr[2]) / 255
	return frame{n: n, mlen: mlen, split: mlen * int(hdr[3]) / 255}
}

type framed struct {
	hdr     []byte
	payload []byte // the kept part
	err     error  // io.EOF (clean end), io.ErrUnexpectedEOF, or nil
}

// readRef reads stream one header and one payload at a time, the way the
// reader did before it had a buffer: the reference for rxBuf.
func readRef(stream []byte) []framed {
	r := bytes.NewReader(stream)
	var out []framed
	for {
		hdr := make([]byte, wire.HeaderSize)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return append(out, framed{err: err})
		}
		f := frameOf(hdr)
		p := make([]byte, f.n)
		if _, err := io.ReadFull(r, p); err != nil {
			return append(out, framed{hdr: hdr, err: io.ErrUnexpectedEOF})
		}
		out = append(out, framed{hdr: hdr, payload: p[:f.mlen]})
	}
}

// readBuf reads stream through an rxBuf, as a connection's reader and Recv
// do, every other payload observed (RecvObserved): the pieces shown must
// be the payload's kept bytes, in order, each at most observedRead long.
func readBuf(t *testing.T, typ wire.ConnType, src io.Reader) []framed {
	var rb rxBuf
	rb.init(typ)
	var out []framed
	for {
		b, err := rb.next(src, wire.HeaderSize)
		if err != nil {
			return append(out, framed{err: err})
		}
		hdr := bytes.Clone(b)
		if typ == wire.ConnBulkIn && rb.buffered() != 0 {
			t.Fatalf("bulk-in buffer read %d bytes past a header", rb.buffered())
		}
		f := frameOf(hdr)
		// Two views with room to spare, so a write past mlen would show.
		v0, v1 := make([]byte, f.split+3), make([]byte, f.mlen-f.split+3)
		dst := [][]byte{v0[:f.split], {}, v1[:f.mlen-f.split]}
		var seen func([]byte)
		var shown []byte
		if len(out)%2 == 1 {
			seen = func(b []byte) {
				if len(b) == 0 || len(b) > observedRead {
					t.Fatalf("observer shown a piece of %d bytes", len(b))
				}
				shown = append(shown, b...)
			}
		}
		if err := rb.payload(src, dst, f.mlen, f.n, seen); err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("payload: %v", err)
			}
			return append(out, framed{hdr: hdr, err: io.ErrUnexpectedEOF})
		}
		if !bytes.Equal(v0[f.split:], make([]byte, 3)) || !bytes.Equal(v1[f.mlen-f.split:], make([]byte, 3)) {
			t.Fatal("payload written past mlen")
		}
		payload := append(v0[:f.split:f.split], v1[:f.mlen-f.split]...)
		if seen != nil && !bytes.Equal(shown, payload) {
			t.Fatalf("observer shown %d bytes that are not the %d of the payload", len(shown), len(payload))
		}
		out = append(out, framed{hdr: hdr, payload: payload})
	}
}

// FuzzRxBuf checks that reading through a connection's buffer, whatever
// the socket hands over per read, gives the same headers, payloads and
// end as reading each header and payload on its own.
func FuzzRxBuf(f *testing.F) {
	msg := func(n, keep, split byte, payloadLen int) []byte {
		hdr := make([]byte, wire.HeaderSize)
		binary.LittleEndian.PutUint16(hdr, uint16(payloadLen))
		hdr[2], hdr[3] = keep, split
		return append(hdr, pattern(uint64(n), payloadLen)...)
	}
	small := append(append(msg(1, 255, 128, 64), msg(2, 255, 0, 0)...), msg(3, 100, 255, 300)...)
	f.Add(small, []byte{255}, false, false)                                // several messages per read
	f.Add(small, []byte{0, 3, 1}, true, false)                             // headers split across reads
	f.Add(msg(4, 255, 77, 6000), []byte{255, 255}, false, false)           // payload past the buffer
	f.Add(msg(5, 30, 10, 8999), []byte{110}, false, true)                  // mostly dropped, EOF with data
	f.Add(small[:len(small)-10], []byte{50}, false, false)                 // cut in a payload
	f.Add(small[:wire.HeaderSize+64+50], []byte{7}, false, false)          // cut in a header
	f.Add(append(msg(6, 255, 1, 5000), small...), []byte{200}, true, true) // bulk-in
	f.Fuzz(func(t *testing.T, stream, chunks []byte, bulk, eofEarly bool) {
		typ := wire.ConnControl
		if bulk {
			typ = wire.ConnBulkIn
		}
		want := readRef(stream)
		got := readBuf(t, typ, &chunkReader{data: stream, chunks: chunks, eofEarly: eofEarly})
		if len(got) != len(want) {
			t.Fatalf("%d frames, want %d", len(got), len(want))
		}
		for i := range want {
			w, g := want[i], got[i]
			if !bytes.Equal(w.hdr, g.hdr) || !bytes.Equal(w.payload, g.payload) || w.err != g.err {
				t.Fatalf("frame %d: got %x %x %v, want %x %x %v", i, g.hdr, g.payload, g.err, w.hdr, w.payload, w.err)
			}
		}
	})
}

func TestRxBufNoProgress(t *testing.T) {
	var rb rxBuf
	rb.init(wire.ConnControl)
	if _, err := rb.next(zeroReader{}, wire.HeaderSize); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("reader that returns nothing: %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

// TestPayloadEmptyViews: Recv takes views of any length, empty ones
// included (a dst that starts with one, say); an observed receive
// (RecvObserved) must fill and show them just as an unobserved one fills
// them, whether the payload's start came with the header or not.
func TestPayloadEmptyViews(t *testing.T) {
	const n = 3000
	for _, c := range []struct {
		name  string
		views []int // the lengths of dst's views, n bytes in all
	}{
		{"one view", []int{n}},
		{"an empty view first", []int{0, n}},
		{"empty views first", []int{0, 0, 1000, n - 1000}},
		{"an empty view between", []int{1000, 0, n - 1000}},
		{"an empty view last", []int{n, 0}},
	} {
		for _, typ := range []wire.ConnType{wire.ConnControl, wire.ConnBulkIn} {
			for _, observed := range []bool{false, true} {
				payload := pattern(uint64(len(c.views)), n)
				hdr := make([]byte, wire.HeaderSize)
				var rb rxBuf
				rb.init(typ)
				src := &chunkReader{data: append(hdr, payload...), chunks: []byte{255, 40}}
				if _, err := rb.next(src, wire.HeaderSize); err != nil {
					t.Fatal(err)
				}
				var dst [][]byte
				for _, k := range c.views {
					dst = append(dst, make([]byte, k))
				}
				var seen func([]byte)
				var shown []byte
				if observed {
					seen = func(b []byte) { shown = append(shown, b...) }
				}
				if err := rb.payload(src, dst, n, n, seen); err != nil {
					t.Errorf("%s, %v, observed %v: %v", c.name, typ, observed, err)
					continue
				}
				if got := bytes.Join(dst, nil); !bytes.Equal(got, payload) {
					t.Errorf("%s, %v, observed %v: views hold other bytes", c.name, typ, observed)
				}
				if observed && !bytes.Equal(shown, payload) {
					t.Errorf("%s, %v, observed %v: shown %d bytes that are not the payload", c.name, typ, observed, len(shown))
				}
			}
		}
	}
}

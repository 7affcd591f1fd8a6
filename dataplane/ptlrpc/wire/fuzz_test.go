package wire

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

// Every decoder of network input is fuzzed with the same two properties: it
// never panics, and whatever it accepts re-encodes to exactly the bytes it
// read. The second is what makes "one value, one encoding" true. Seeds are
// added here and committed under testdata/fuzz.

func FuzzHeaderUnmarshal(f *testing.F) {
	for _, h := range sampleHeaders() {
		b := make([]byte, HeaderSize)
		if err := h.Marshal(b); err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(bytes.Clone(b), "body"...))
		f.Add(b[:HeaderSize-1])
		swapped := bytes.Clone(b)
		binary.BigEndian.PutUint32(swapped, Magic)
		f.Add(swapped)
		flag := bytes.Clone(b)
		flag[20] ^= 0x10
		f.Add(flag)
		crc32 := bytes.Clone(b)
		crc32[21] ^= byte(MsgBulkCksumCRC32 >> 8)
		f.Add(crc32)
		status := bytes.Clone(b)
		binary.LittleEndian.PutUint32(status[16:], 0xfffff000)
		f.Add(status)
		job := bytes.Clone(b)
		job[HeaderSize-1] = 'x'
		f.Add(job)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Header
		if err := h.Unmarshal(data); err != nil {
			return
		}
		out := make([]byte, HeaderSize)
		if err := h.Marshal(out); err != nil {
			t.Fatalf("Unmarshal accepted %+v but Marshal refuses it: %v", h, err)
		}
		if !bytes.Equal(out, data[:HeaderSize]) {
			t.Fatalf("re-encoding differs:\n  in % x\n out % x", data[:HeaderSize], out)
		}
		var again Header
		if err := again.Unmarshal(out); err != nil || again != h {
			t.Fatalf("second decode: %+v, %v; want %+v", again, err, h)
		}
		var j Header
		if err := j.SetJobID(h.JobID()); err != nil || j.jobID != h.jobID {
			t.Fatalf("job id %q does not survive SetJobID(JobID()): %v", h.JobID(), err)
		}
	})
}

func FuzzParseNiobufs(f *testing.F) {
	for _, n := range sampleNiobufs() {
		b, err := AppendNiobufs(nil, n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint16(len(n)))
		f.Add(b, uint16(0))
		f.Add(append(bytes.Clone(b), 0), uint16(8))
		if len(b) > 0 {
			f.Add(b[:len(b)-1], uint16(8))
			flags := bytes.Clone(b)
			flags[12] |= 1
			f.Add(flags, uint16(8))
			zero := bytes.Clone(b)
			clear(zero[8:12])
			f.Add(zero, uint16(8))
		}
	}
	two, _ := AppendNiobufs(nil, []Niobuf{{Offset: 0, Len: 10}, {Offset: 20, Len: 10}})
	swapped := append(bytes.Clone(two[16:]), two[:16]...)
	f.Add(swapped, uint16(8))
	overlap := bytes.Clone(two)
	overlap[16] = 5
	f.Add(overlap, uint16(8))
	f.Fuzz(func(t *testing.T, data []byte, maxCount uint16) {
		n, err := ParseNiobufs(data, int(maxCount))
		if err != nil {
			if n != nil {
				t.Fatalf("ParseNiobufs returned %v with error %v", n, err)
			}
			return
		}
		if len(n) > int(maxCount) {
			t.Fatalf("ParseNiobufs returned %d niobufs, max %d", len(n), maxCount)
		}
		out, err := AppendNiobufs(nil, n)
		if err != nil {
			t.Fatalf("ParseNiobufs accepted %v but AppendNiobufs refuses it: %v", n, err)
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("re-encoding differs:\n  in % x\n out % x", data, out)
		}
		var total uint64
		for i, nb := range n {
			if nb.Len == 0 || nb.End() < nb.Offset || (i > 0 && nb.Offset < n[i-1].End()) {
				t.Fatalf("accepted bad niobuf %d in %v", i, n)
			}
			total += uint64(nb.Len)
		}
		if total > MaxBulkSize {
			t.Fatalf("accepted %d bytes of bulk", total)
		}
		again, err := ParseNiobufs(out, len(n))
		if err != nil || !reflect.DeepEqual(again, n) {
			t.Fatalf("second decode: %v, %v; want %v", again, err, n)
		}
	})
}

package ptlrpc

import (
	"context"
	"hash/crc32"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	ptlrpcv1 "github.com/nacrefs/nacre/proto/nacre/ptlrpc/v1"
)

func TestChecksumTypes(t *testing.T) {
	data := pattern(100<<10+7, 3)
	split := splitIOV(data, 1, 4095, 50<<10)
	for _, c := range []struct {
		t    ChecksumType
		name string
		want uint32
	}{
		{ChecksumCRC32, "crc32", crc32.ChecksumIEEE(data)},
		{ChecksumCRC32C, "crc32c", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))},
		{0, "0", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))}, // no type: CRC-32C
	} {
		if got := c.t.Sum(split); got != c.want {
			t.Errorf("%v: sum %#x, want %#x", c.t, got, c.want)
		}
		if c.t == 0 {
			continue
		}
		if got := c.t.String(); got != c.name {
			t.Errorf("%v: name %q", c.t, got)
		}
		if got, err := ParseChecksumType(c.name); err != nil || got != c.t {
			t.Errorf("parse %q: %v, %v", c.name, got, err)
		}
		if f := flagChecksum(c.t.flags()); f != c.t {
			t.Errorf("%v: header flags %v give %v", c.t, c.t.flags(), f)
		}
	}
	if got := ChecksumTypes.String(); got != "crc32 crc32c" {
		t.Errorf("set name %q", got)
	}
	for _, c := range []struct {
		set, inUse ChecksumType
		want       string
	}{{ChecksumTypes, ChecksumCRC32, "[crc32] crc32c"}, {ChecksumTypes, ChecksumCRC32C, "crc32 [crc32c]"}, {ChecksumCRC32C, ChecksumCRC32C, "[crc32c]"}} {
		if got := c.set.List(c.inUse); got != c.want {
			t.Errorf("%v.List(%v) = %q, want %q", c.set, c.inUse, got, c.want)
		}
	}
	for _, bad := range []string{"", "adler", "CRC32", "crc32 crc32c"} {
		if _, err := ParseChecksumType(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
	if got := FastestChecksum(ChecksumCRC32C); got != ChecksumCRC32C {
		t.Errorf("fastest of crc32c alone: %v", got)
	}
	if got := FastestChecksum(0x2); got != ChecksumCRC32C { // adler: not handled here
		t.Errorf("fastest of none handled: %v", got)
	}
	if got := FastestChecksum(ChecksumTypes); got != ChecksumCRC32 && got != ChecksumCRC32C {
		t.Errorf("fastest of all: %v", got)
	}
}

// TestChecksumNegotiation: CONNECT agrees on the algorithms both sides
// handle, and a peer that names none (older than the negotiation) gets
// CRC-32C, the one it knew.
func TestChecksumNegotiation(t *testing.T) {
	ts := NewTargetSet()
	tgt, err := ts.NewTarget(TargetConfig{Name: "nacre-OST0000", AutoCommit: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close(context.Background())
	for i, c := range []struct {
		offer uint32
		want  ChecksumType
	}{
		{0, ChecksumCRC32C},
		{uint32(ChecksumTypes), ChecksumTypes},
		{uint32(ChecksumCRC32) | 0x2 | 0x80, ChecksumCRC32}, // adler and an unknown bit: not agreed
		{0x2, ChecksumCRC32C},
	} {
		body, _ := proto.Marshal(&ptlrpcv1.ConnectRequest{Target: "nacre-OST0000", ClientUuid: "c" + string(rune('a'+i)),
			Version: wire.Version, ConnCount: 1, CksumTypes: c.offer})
		rep, status := ts.connect(&Request{Body: body})
		if status != 0 {
			t.Fatalf("offer %#x: status %d", c.offer, status)
		}
		var cr ptlrpcv1.ConnectReply
		if err := proto.Unmarshal(rep, &cr); err != nil {
			t.Fatal(err)
		}
		if got := ChecksumType(cr.CksumTypes); got != c.want {
			t.Errorf("offer %#x: agreed %v, want %v", c.offer, got, c.want)
		}
	}

	te := newTgtEnv(t, loEnv, TargetConfig{AutoCommit: true})
	imp, err := te.c.NewImport(te.importCfg())
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close(context.Background())
	if got := imp.ChecksumTypes(); got != ChecksumCRC32C {
		t.Errorf("before connecting: %v, want crc32c", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := imp.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := imp.ChecksumTypes(); got != ChecksumTypes {
		t.Errorf("connected: %v, want %v", got, ChecksumTypes)
	}
}

// Combine gives the checksum of two pieces joined, for every cut of a
// buffer, both algorithms, and pieces of every size the bulk path makes.
func TestChecksumCombine(t *testing.T) {
	data := pattern(2<<20+13, 5)
	for _, ct := range []ChecksumType{ChecksumCRC32, ChecksumCRC32C} {
		whole := ct.Sum([][]byte{data})
		for _, cut := range []int{0, 1, 7, 4096, 1 << 20, len(data) - 1, len(data)} {
			a, b := data[:cut], data[cut:]
			if got := ct.Combine(ct.Sum([][]byte{a}), ct.Sum([][]byte{b}), len(b)); got != whole {
				t.Errorf("%v: cut at %d: combined %#x, want %#x", ct, cut, got, whole)
			}
		}
	}
}

// A Shifter joins as Combine does, for pieces of its length; Update goes
// on from a sum as if the bytes had been summed in one go.
func TestChecksumShifter(t *testing.T) {
	data := pattern(64<<10, 9)
	for _, ct := range []ChecksumType{ChecksumCRC32, ChecksumCRC32C} {
		whole := ct.Sum([][]byte{data})
		for _, n := range []int{1, 100, 4096, 16 << 10} {
			sh := ct.Shifter(n)
			if sh.Len() != n {
				t.Fatalf("%v: Shifter(%d).Len() = %d", ct, n, sh.Len())
			}
			var got uint32
			for off := 0; off < len(data); off += n {
				piece := data[off:min(off+n, len(data))]
				if len(piece) == n {
					got = sh.Combine(got, ct.Update(0, piece))
				} else {
					got = ct.Combine(got, ct.Update(0, piece), len(piece))
				}
			}
			if got != whole {
				t.Errorf("%v: pieces of %d joined to %#x, want %#x", ct, n, got, whole)
			}
		}
		if got := ct.Update(ct.Update(0, data[:777]), data[777:]); got != whole {
			t.Errorf("%v: Update in two goes %#x, want %#x", ct, got, whole)
		}
	}
}

// bulkSums give a bulk's checksum from its fragments' pieces only when
// they were shown every byte of each fragment in order; otherwise verify
// sums the buffer again, so it is never wrong.
func TestBulkSums(t *testing.T) {
	const n = 2*bulkFragment + 1000
	data := pattern(n, 9)
	frag := func(i int) []byte { return data[i*bulkFragment : min(n, (i+1)*bulkFragment)] }
	show := func(s *bulkSums, i, off, k int) { s.observer(i)(off, frag(i)[off:off+k]) }
	all := func(s *bulkSums, piece int) {
		for i := range 3 {
			f := frag(i)
			for off := 0; off < len(f); off += piece {
				show(s, i, off, min(piece, len(f)-off))
			}
		}
	}
	for _, ct := range []ChecksumType{ChecksumCRC32, ChecksumCRC32C} {
		want := ct.Sum([][]byte{data})
		cases := []struct {
			name string
			show func(s *bulkSums)
			ok   bool
		}{
			{"whole fragments", func(s *bulkSums) { all(s, bulkFragment) }, true},
			{"pieces", func(s *bulkSums) { all(s, 128<<10-3) }, true},
			{"fragments out of order", func(s *bulkSums) {
				show(s, 2, 0, 1000)
				show(s, 0, 0, bulkFragment)
				show(s, 1, 0, bulkFragment)
			}, true},
			{"a fragment missing", func(s *bulkSums) {
				show(s, 0, 0, bulkFragment)
				show(s, 2, 0, 1000)
			}, false},
			{"a fragment short", func(s *bulkSums) {
				all(s, bulkFragment)
				show(s, 1, 0, 100)
			}, false},
			{"a piece skipped", func(s *bulkSums) {
				show(s, 0, 0, 100)
				show(s, 0, 200, bulkFragment-200)
				show(s, 1, 0, bulkFragment)
				show(s, 2, 0, 1000)
			}, false},
			{"a fragment landed twice", func(s *bulkSums) {
				all(s, 64<<10)
				show(s, 1, 0, bulkFragment)
			}, true},
		}
		for _, c := range cases {
			s := newBulkSums(ct)
			c.show(s)
			got, ok := s.sum(ct, n)
			if ok != c.ok || (ok && got != want) {
				t.Errorf("%v, %s: sum %#x %v, want %#x %v", ct, c.name, got, ok, want, c.ok)
			}
			if v := s.verify(ct, [][]byte{data}, n, want); v != want {
				t.Errorf("%v, %s: verify %#x, want %#x", ct, c.name, v, want)
			}
		}
		// A read shorter than the buffer: the sums must cover just it.
		s := newBulkSums(ct)
		show(s, 0, 0, bulkFragment)
		show(s, 1, 0, 10)
		if got, ok := s.sum(ct, bulkFragment+10); !ok || got != ct.Sum([][]byte{data[:bulkFragment+10]}) {
			t.Errorf("%v: short read: sum %#x %v", ct, got, ok)
		}
		// Sums of the other algorithm are no answer.
		other := ChecksumCRC32C
		if ct == ChecksumCRC32C {
			other = ChecksumCRC32
		}
		s = newBulkSums(other)
		all(s, bulkFragment)
		if _, ok := s.sum(ct, n); ok {
			t.Errorf("%v: sums of %v taken", ct, other)
		}
	}
	var none *bulkSums
	if none.observer(0) != nil {
		t.Error("nil sums have an observer")
	}
	if got := none.verify(ChecksumCRC32C, [][]byte{data}, 10, 0); got != ChecksumCRC32C.Sum([][]byte{data[:10]}) {
		t.Errorf("nil sums: verify %#x", got)
	}
}

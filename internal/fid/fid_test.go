package fid

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

func TestStringAndParse(t *testing.T) {
	tests := []struct {
		in   string
		want FID
		str  string // String() of want
	}{
		{"[0x200000400:0x1:0x0]", FID{0x200000400, 1, 0}, "[0x200000400:0x1:0x0]"},
		{"0x200000400:0x1:0x0", FID{0x200000400, 1, 0}, "[0x200000400:0x1:0x0]"},
		{"[0x200000007:0x1:0x0]", FID{SeqRoot, 1, 0}, "[0x200000007:0x1:0x0]"},
		{"[0X2C0000401:0XABCDEF:0x0]", FID{0x2c0000401, 0xabcdef, 0}, "[0x2c0000401:0xabcdef:0x0]"},
		{"[0:0:0]", FID{}, "[0x0:0x0:0x0]"},
		{"8589935616:1:0", FID{0x200000400, 1, 0}, "[0x200000400:0x1:0x0]"},
		{"[0xffffffffffffffff:0xffffffff:0xffffffff]", FID{^uint64(0), ^uint32(0), ^uint32(0)}, "[0xffffffffffffffff:0xffffffff:0xffffffff]"},
		{"[0x0000000200000400:0x00001:0x0]", FID{0x200000400, 1, 0}, "[0x200000400:0x1:0x0]"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			if s := got.String(); s != tt.str {
				t.Fatalf("String() = %q, want %q", s, tt.str)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{
		"", "[]", "[", "]", "[0x1:0x2:0x3", "0x1:0x2:0x3]", "[[0x1:0x2:0x3]]",
		"0x1:0x2", "0x1", "0x1:0x2:0x3:0x4", "0x1::0x3", ":0x2:0x3", "0x1:0x2:",
		"0x:0x1:0x0", "0x1:0x100000000:0x0", "0x1:0x1:0x100000000",
		"0x10000000000000000:0x1:0x0", "-1:0:0", "+1:0:0", "0x1_0:0:0", " 0x1:0x1:0x0",
		"0x1:0x1:0x0 ", "0xg:0:0", "12a:0:0", "0x1:0x2:0x3\n", "[0x1:0x2:0x3]x",
	} {
		if f, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, f)
		} else if !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) error %v does not wrap ErrSyntax", in, err)
		}
	}
}

func TestBinary(t *testing.T) {
	f := FID{Seq: 0x0102030405060708, Oid: 0x090a0b0c, Ver: 0x0d0e0f10}
	want := []byte{8, 7, 6, 5, 4, 3, 2, 1, 0x0c, 0x0b, 0x0a, 9, 0x10, 0x0f, 0x0e, 0x0d}
	b, err := f.MarshalBinary()
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("MarshalBinary = %x, %v; want %x", b, err, want)
	}
	b, _ = f.AppendBinary([]byte{0xaa})
	if !bytes.Equal(b[1:], want) || b[0] != 0xaa {
		t.Fatalf("AppendBinary = %x", b)
	}
	var g FID
	if err := g.UnmarshalBinary(want); err != nil || g != f {
		t.Fatalf("UnmarshalBinary = %v, %v", g, err)
	}
	for _, n := range []int{0, 15, 17} {
		g := FID{Seq: 9}
		if err := g.UnmarshalBinary(make([]byte, n)); !errors.Is(err, ErrSyntax) || g.Seq != 9 {
			t.Errorf("UnmarshalBinary(%d bytes) = %v, left %v", n, err, g)
		}
	}
	if _, err := Get(want[:15]); !errors.Is(err, ErrSyntax) {
		t.Errorf("Get(15 bytes) = %v", err)
	}
}

func TestText(t *testing.T) {
	type rec struct{ F FID }
	b, err := json.Marshal(rec{FID{0x200000400, 7, 0}})
	if err != nil || string(b) != `{"F":"[0x200000400:0x7:0x0]"}` {
		t.Fatalf("json = %s, %v", b, err)
	}
	var r rec
	if err := json.Unmarshal(b, &r); err != nil || r.F != (FID{0x200000400, 7, 0}) {
		t.Fatalf("json round trip = %v, %v", r, err)
	}
	if err := json.Unmarshal([]byte(`{"F":"nope"}`), &r); err == nil {
		t.Fatal("json accepted a bad FID")
	}
}

func TestClasses(t *testing.T) {
	tests := []struct {
		f                            FID
		zero, idif, normal, saneWant bool
	}{
		{FID{}, true, false, false, false},
		{FID{Seq: SeqNormal, Oid: 1}, false, false, true, true},
		{FID{Seq: SeqNormal, Oid: 1, Ver: 1}, false, false, true, false},
		{FID{Seq: SeqRoot, Oid: 1}, false, false, false, true},
		{FID{Seq: SeqIDIF | 3<<16, Oid: 5}, false, true, false, true},
		{FID{Seq: 1, Oid: 1}, false, false, false, true},
		{FID{Seq: 12, Oid: 1}, false, false, false, false},
		{FID{Seq: SeqLOVDefault}, false, false, false, false},
	}
	for _, tt := range tests {
		if tt.f.IsZero() != tt.zero || tt.f.IsIDIF() != tt.idif || tt.f.IsNormal() != tt.normal || tt.f.IsSane() != tt.saneWant {
			t.Errorf("%v: zero %v idif %v normal %v sane %v", tt.f, tt.f.IsZero(), tt.f.IsIDIF(), tt.f.IsNormal(), tt.f.IsSane())
		}
	}
}

func TestIDIF(t *testing.T) {
	f, err := IDIF(0x123456789abc, 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := (FID{Seq: 0x100071234, Oid: 0x56789abc, Ver: 0}); f != want {
		t.Fatalf("IDIF = %v, want %v", f, want)
	}
	if !f.IsIDIF() {
		t.Fatal("IDIF result is not IDIF")
	}
	if _, err := IDIF(1<<48, 0); err == nil {
		t.Fatal("IDIF accepted a 49-bit id")
	}
	if _, err := IDIF(1, 0x10000); err == nil {
		t.Fatal("IDIF accepted a 17-bit OST index")
	}
}

func TestCompare(t *testing.T) {
	fs := []FID{{2, 0, 0}, {1, 2, 0}, {1, 1, 5}, {1, 1, 0}, {0, 9, 9}}
	slices.SortFunc(fs, Compare)
	want := []FID{{0, 9, 9}, {1, 1, 0}, {1, 1, 5}, {1, 2, 0}, {2, 0, 0}}
	if !slices.Equal(fs, want) {
		t.Fatalf("sorted = %v", fs)
	}
	if Compare(want[1], want[1]) != 0 {
		t.Fatal("Compare(x, x) != 0")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"[0x200000400:0x1:0x0]", "0x1:0x2:0x3", "1:2:3", "[0:0:0]", "[0x:0:0]", "[0x1:0x2:0x3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fid, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrSyntax", s, err)
			}
			return
		}
		str := fid.String()
		back, err := Parse(str)
		if err != nil || back != fid {
			t.Fatalf("Parse(%q) = %v; String %q parses to %v, %v", s, fid, str, back, err)
		}
		if str2 := back.String(); str2 != str {
			t.Fatalf("String not canonical: %q then %q", str, str2)
		}
	})
}

func FuzzUnmarshalBinary(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Add([]byte{8, 7, 6, 5, 4, 3, 2, 1, 0x0c, 0x0b, 0x0a, 9, 0x10, 0x0f, 0x0e, 0x0d})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var fid FID
		err := fid.UnmarshalBinary(b)
		if len(b) != Size {
			if err == nil {
				t.Fatalf("accepted %d bytes", len(b))
			}
			return
		}
		if err != nil {
			t.Fatalf("rejected %x: %v", b, err)
		}
		out, _ := fid.MarshalBinary()
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip %x -> %v -> %x", b, fid, out)
		}
		if back, err := Parse(fid.String()); err != nil || back != fid {
			t.Fatalf("text round trip of %v: %v, %v", fid, back, err)
		}
	})
}

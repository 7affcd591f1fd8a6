package wire

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseNet(t *testing.T) {
	tests := []struct {
		in   string
		want Net
		out  string // canonical form; "" means same as in
	}{
		{"tcp", Net{TCP, 0}, ""},
		{"tcp0", Net{TCP, 0}, "tcp"},
		{"tcp1", Net{TCP, 1}, ""},
		{"tcp01", Net{TCP, 1}, "tcp1"},
		{"tcp65535", Net{TCP, 65535}, ""},
		{"o2ib", Net{O2IB, 0}, ""},
		{"o2ib3", Net{O2IB, 3}, ""},
		{"lo", Net{LO, 0}, ""},
	}
	for _, tt := range tests {
		got, err := ParseNet(tt.in)
		if err != nil {
			t.Errorf("ParseNet(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseNet(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		out := tt.out
		if out == "" {
			out = tt.in
		}
		if s := got.String(); s != out {
			t.Errorf("ParseNet(%q).String() = %q, want %q", tt.in, s, out)
		}
	}
}

func TestParseNetRejects(t *testing.T) {
	for _, in := range []string{
		"", "tcpx", "tcp65536", "tcp99999", "tcp-1", "tcp+1", "TCP", "Tcp", " tcp", "tcp ",
		"tcp 1", "lo0", "lo1", "o2", "o2ib1x", "gni", "tcp1.5", "tcp٣", // Arabic-Indic digit
	} {
		if n, err := ParseNet(in); err == nil {
			t.Errorf("ParseNet(%q) = %v, want error", in, n)
		} else if !errors.Is(err, ErrBadNet) {
			t.Errorf("ParseNet(%q) error %v does not wrap ErrBadNet", in, err)
		}
	}
}

func TestNetString(t *testing.T) {
	tests := []struct {
		n    Net
		want string
	}{
		{Net{}, "<?>"},
		{Net{TCP, 7}, "tcp7"},
		{Net{LO, 1}, "<net type=9 num=1>"},
		{Net{42, 3}, "<net type=42 num=3>"},
	}
	for _, tt := range tests {
		if got := tt.n.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestNetType(t *testing.T) {
	for _, tt := range []struct {
		t    NetType
		name string
	}{{TCP, "tcp"}, {O2IB, "o2ib"}, {LO, "lo"}} {
		if got := tt.t.String(); got != tt.name {
			t.Errorf("%d.String() = %q, want %q", tt.t, got, tt.name)
		}
		got, err := ParseNetType(tt.name)
		if err != nil || got != tt.t {
			t.Errorf("ParseNetType(%q) = %v, %v; want %v", tt.name, got, err, tt.t)
		}
	}
	if got := NetType(7).String(); got != "NetType(7)" {
		t.Errorf("NetType(7).String() = %q", got)
	}
	for _, in := range []string{"", "tcp1", "TCP", "udp"} {
		if _, err := ParseNetType(in); !errors.Is(err, ErrBadNet) {
			t.Errorf("ParseNetType(%q) error = %v, want ErrBadNet", in, err)
		}
	}
}

func TestParseNID(t *testing.T) {
	tests := []struct {
		in   string
		want NID
		out  string // canonical form; "" means same as in
	}{
		{"192.168.1.5@tcp", NID{Net{TCP, 0}, netip.MustParseAddr("192.168.1.5")}, ""},
		{"10.0.0.1@tcp1", NID{Net{TCP, 1}, netip.MustParseAddr("10.0.0.1")}, ""},
		{"10.0.0.1@tcp0", NID{Net{TCP, 0}, netip.MustParseAddr("10.0.0.1")}, "10.0.0.1@tcp"},
		{"0@lo", LoNID, ""},
		{"192.168.2.1@o2ib", NID{Net{O2IB, 0}, netip.MustParseAddr("192.168.2.1")}, ""},
		{"192.168.2.1@o2ib3", NID{Net{O2IB, 3}, netip.MustParseAddr("192.168.2.1")}, ""},
		{"0.0.0.0@tcp", NID{Net{TCP, 0}, netip.MustParseAddr("0.0.0.0")}, ""},
		{"255.255.255.255@tcp65535", NID{Net{TCP, 65535}, netip.MustParseAddr("255.255.255.255")}, ""},
		{"[::1]@tcp", NID{Net{TCP, 0}, netip.MustParseAddr("::1")}, ""},
		{"::1@tcp", NID{Net{TCP, 0}, netip.MustParseAddr("::1")}, "[::1]@tcp"},
		{"[fd00:0:0::5]@o2ib2", NID{Net{O2IB, 2}, netip.MustParseAddr("fd00::5")}, "[fd00::5]@o2ib2"},
		{"[2001:db8::1:2]@tcp4", NID{Net{TCP, 4}, netip.MustParseAddr("2001:db8::1:2")}, ""},
		{"FD00::A@tcp", NID{Net{TCP, 0}, netip.MustParseAddr("fd00::a")}, "[fd00::a]@tcp"},
	}
	for _, tt := range tests {
		got, err := ParseNID(tt.in)
		if err != nil {
			t.Errorf("ParseNID(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseNID(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("ParseNID(%q).Validate() = %v", tt.in, err)
		}
		out := tt.out
		if out == "" {
			out = tt.in
		}
		if s := got.String(); s != out {
			t.Errorf("ParseNID(%q).String() = %q, want %q", tt.in, s, out)
		}
		if again, err := ParseNID(got.String()); err != nil || again != got {
			t.Errorf("ParseNID(%q) = %v, %v; want %v", got.String(), again, err, got)
		}
	}
}

func TestParseNIDRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"@tcp",
		"1.2.3.4@",
		"1.2.3.4",
		"1.2.3.4@tcpx",
		"1.2.3.4@tcp99999",
		"1.2.3.4@tcp65536",
		"300.1.1.1@tcp",
		"1.2.3@tcp",
		"01.2.3.4@tcp",  // leading zero: octal or decimal?
		"1@lo",          // only 0@lo
		"00@lo",         // only 0@lo
		"127.0.0.1@lo",  // only 0@lo
		"[::]@lo",       // only 0@lo
		"0@lo1",         // lo has no number
		"0@lo0",         // lo has no number
		"0@tcp",         // tcp needs an IP address
		" 1.2.3.4@tcp",  // whitespace
		"1.2.3.4@tcp ",  // whitespace
		"1.2.3.4 @tcp",  // whitespace
		"1.2.3.4@ tcp",  // whitespace
		"1.2.3.4@tcp\n", // whitespace
		"\t0@lo",        // whitespace
		"host@tcp",
		"1.2.3.4@TCP",
		"1.2.3.4@@tcp",
		"1.2.3.4@tcp@tcp",
		"[1.2.3.4]@tcp",           // brackets only for IPv6
		"[::1@tcp",                // unclosed
		"[::1]]@tcp",              // junk
		"::ffff:1.2.3.4@tcp",      // IPv4-mapped
		"[::ffff:1.2.3.4]@tcp",    // IPv4-mapped
		"fe80::1%eth0@tcp",        // zone
		"[fe80::1%eth0]@tcp",      // zone
		"<?>",                     // AnyNID prints but does not parse
		"12345-1.2.3.4@tcp",       // a process id, not a NID
		"1.2.3.4@tcp1.5",          // junk after net
		"1.2.3.4@o2ib-1",          // junk after net
		"<net type=42 num=1>@tcp", // garbage
	} {
		n, err := ParseNID(in)
		if err == nil {
			t.Errorf("ParseNID(%q) = %v, want error", in, n)
			continue
		}
		if !errors.Is(err, ErrBadNID) {
			t.Errorf("ParseNID(%q) error %v does not wrap ErrBadNID", in, err)
		}
		if !strings.Contains(err.Error(), "lnet: bad NID") {
			t.Errorf("ParseNID(%q) error %q lacks the sentinel text", in, err)
		}
	}
}

func TestParseNIDErrorText(t *testing.T) {
	_, err := ParseNID("1@lo")
	if got, want := err.Error(), `lnet: bad NID "1@lo": the only NID on lo is 0@lo`; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

func TestMustParseNID(t *testing.T) {
	if got := MustParseNID("0@lo"); got != LoNID {
		t.Errorf("MustParseNID(0@lo) = %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustParseNID(bad) did not panic")
		}
	}()
	MustParseNID("1@lo")
}

func TestNIDZero(t *testing.T) {
	var n NID
	if !n.IsZero() || n != AnyNID || !AnyNID.IsZero() {
		t.Error("zero NID is not AnyNID")
	}
	if LoNID.IsZero() || MustParseNID("1.2.3.4@tcp").IsZero() {
		t.Error("non-zero NID reports IsZero")
	}
	if got := n.String(); got != "<?>" {
		t.Errorf("AnyNID.String() = %q, want <?>", got)
	}
	if err := n.Validate(); !errors.Is(err, ErrBadNID) {
		t.Errorf("AnyNID.Validate() = %v, want ErrBadNID", err)
	}
}

func TestNIDValidate(t *testing.T) {
	v4 := netip.MustParseAddr("1.2.3.4")
	for _, n := range []NID{
		{Net{TCP, 0}, netip.Addr{}},
		{Net{O2IB, 1}, netip.Addr{}},
		{Net{TCP, 0}, netip.AddrFrom16(v4.As16())},         // IPv4-mapped
		{Net{TCP, 0}, netip.MustParseAddr("fe80::1%eth0")}, // zone
		{Net{LO, 0}, v4},                                   // lo with address
		{Net{LO, 1}, netip.Addr{}},                         // lo with number
		{Net{42, 0}, v4},                                   // unknown type
		{Net{0, 1}, v4},                                    // no type
	} {
		if err := n.Validate(); !errors.Is(err, ErrBadNID) {
			t.Errorf("%#v.Validate() = %v, want ErrBadNID", n, err)
		}
		_ = n.String() // must not panic
	}
}

func TestParseProcessID(t *testing.T) {
	tests := []struct {
		in   string
		want ProcessID
		out  string
	}{
		{"12345-192.168.1.5@tcp", ProcessID{MustParseNID("192.168.1.5@tcp"), PIDLustre}, ""},
		{"0-0@lo", ProcessID{LoNID, 0}, ""},
		{"4294967295-10.0.0.1@tcp1", ProcessID{MustParseNID("10.0.0.1@tcp1"), PIDAny}, ""},
		{"12345-[fd00::1]@o2ib", ProcessID{MustParseNID("[fd00::1]@o2ib"), 12345}, ""},
		{"007-0@lo", ProcessID{LoNID, 7}, "7-0@lo"},
	}
	for _, tt := range tests {
		got, err := ParseProcessID(tt.in)
		if err != nil {
			t.Errorf("ParseProcessID(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseProcessID(%q) = %v, want %v", tt.in, got, tt.want)
		}
		out := tt.out
		if out == "" {
			out = tt.in
		}
		if s := got.String(); s != out {
			t.Errorf("ParseProcessID(%q).String() = %q, want %q", tt.in, s, out)
		}
	}
	for _, in := range []string{
		"", "12345", "-0@lo", "12345-", "x-0@lo", "4294967296-0@lo", "+1-0@lo", " 1-0@lo",
		"1 -0@lo", "1-1@lo", "12345-1.2.3.4@tcpx", "0@lo", "1--0@lo",
	} {
		if p, err := ParseProcessID(in); !errors.Is(err, ErrBadNID) {
			t.Errorf("ParseProcessID(%q) = %v, %v; want ErrBadNID", in, p, err)
		}
	}
}

func TestNIDBinaryGolden(t *testing.T) {
	tests := []struct {
		nid  string
		want []byte
	}{
		{"192.168.1.5@tcp1", []byte{
			2, 0, 1, 0, 4, 0, 0, 0,
			192, 168, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		}},
		{"0@lo", []byte{
			9, 0, 0, 0, 0, 0, 0, 0,
			0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		}},
		{"[fd00::1]@o2ib258", []byte{
			5, 0, 2, 1, 16, 0, 0, 0,
			0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
		}},
	}
	for _, tt := range tests {
		n := MustParseNID(tt.nid)
		b := make([]byte, NIDSize)
		PutNID(b, n)
		if !bytes.Equal(b, tt.want) {
			t.Errorf("PutNID(%v) = % x, want % x", n, b, tt.want)
		}
		got, err := GetNID(b)
		if err != nil || got != n {
			t.Errorf("GetNID(% x) = %v, %v; want %v", b, got, err, n)
		}
	}
	// AnyNID is all zeros and decodes back to AnyNID.
	b := bytes.Repeat([]byte{0xff}, NIDSize)
	PutNID(b, AnyNID)
	if !bytes.Equal(b, make([]byte, NIDSize)) {
		t.Errorf("PutNID(AnyNID) = % x, want zeros", b)
	}
	if got, err := GetNID(b); err != nil || !got.IsZero() {
		t.Errorf("GetNID(zeros) = %v, %v; want AnyNID", got, err)
	}
}

func TestGetNIDRejects(t *testing.T) {
	valid := func() []byte {
		b := make([]byte, NIDSize)
		PutNID(b, MustParseNID("10.1.2.3@tcp"))
		return b
	}
	tests := []struct {
		name   string
		mutate func(b []byte) []byte
		want   error
	}{
		{"short", func(b []byte) []byte { return b[:NIDSize-1] }, ErrShort},
		{"empty", func(b []byte) []byte { return nil }, ErrShort},
		{"unknown type", func(b []byte) []byte { b[0] = 3; return b }, ErrBadNID},
		{"type 0xffff", func(b []byte) []byte { b[0], b[1] = 0xff, 0xff; return b }, ErrBadNID},
		{"type 0 with address", func(b []byte) []byte { b[0] = 0; return b }, ErrBadNID},
		{"type 0 with number", func(b []byte) []byte { clear(b); b[2] = 1; return b }, ErrBadNID},
		{"length 0 on tcp", func(b []byte) []byte { b[4] = 0; return b }, ErrBadNID},
		{"length 5", func(b []byte) []byte { b[4] = 5; return b }, ErrBadNID},
		{"length 255", func(b []byte) []byte { b[4] = 255; return b }, ErrBadNID},
		{"padding 5", func(b []byte) []byte { b[5] = 1; return b }, ErrBadNID},
		{"padding 7", func(b []byte) []byte { b[7] = 1; return b }, ErrBadNID},
		{"bytes past IPv4", func(b []byte) []byte { b[23] = 1; return b }, ErrBadNID},
		{"lo with number", func(b []byte) []byte { clear(b); b[0] = 9; b[2] = 1; return b }, ErrBadNID},
		{"lo with length", func(b []byte) []byte { clear(b); b[0] = 9; b[4] = 4; return b }, ErrBadNID},
		{"lo with address", func(b []byte) []byte { clear(b); b[0] = 9; b[8] = 127; return b }, ErrBadNID},
		{"IPv4-mapped", func(b []byte) []byte {
			PutNID(b, NID{Net{TCP, 0}, netip.MustParseAddr("::ffff:1.2.3.4")})
			return b
		}, ErrBadNID},
	}
	for _, tt := range tests {
		b := tt.mutate(valid())
		if n, err := GetNID(b); !errors.Is(err, tt.want) {
			t.Errorf("%s: GetNID(% x) = %v, %v; want %v", tt.name, b, n, err, tt.want)
		}
	}
}

func TestNIDAppendToNoAlloc(t *testing.T) {
	n := MustParseNID("10.0.0.1@tcp1")
	buf := make([]byte, 0, 64)
	if allocs := testing.AllocsPerRun(100, func() { buf = n.AppendTo(buf[:0]) }); allocs != 0 {
		t.Errorf("AppendTo allocates %v times", allocs)
	}
	if string(buf) != "10.0.0.1@tcp1" {
		t.Errorf("AppendTo = %q", buf)
	}
}

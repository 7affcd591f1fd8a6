package wire

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"reflect"
	"testing"
)

// Every decoder of network input is fuzzed with the same two properties: it
// never panics, and whatever it accepts re-encodes to exactly the bytes it
// read. The second is what makes "one value, one encoding" true.

func FuzzHeaderUnmarshal(f *testing.F) {
	for _, h := range sampleHeaders() {
		b := make([]byte, HeaderSize)
		if err := h.Marshal(b); err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(bytes.Clone(b), "payload"...))
		f.Add(b[:HeaderSize-1])
		swapped := bytes.Clone(b)
		binary.BigEndian.PutUint32(swapped, HeaderMagic)
		f.Add(swapped)
		unused := bytes.Clone(b)
		unused[116] ^= 1
		f.Add(unused)
		badNID := bytes.Clone(b)
		badNID[16] = 5
		f.Add(badNID)
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
	})
}

func FuzzReadHello(f *testing.F) {
	full := sampleHello()
	full.IPs = nil
	for i := range MaxHelloIPs {
		full.IPs = append(full.IPs, netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}))
	}
	noIPs := sampleHello()
	noIPs.IPs = nil
	for _, h := range []Hello{sampleHello(), noIPs, full} {
		b, err := h.AppendBinary(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(bytes.Clone(b), "next"...))
		f.Add(b[:len(b)-1])
		f.Add(b[:8])
		swapped := bytes.Clone(b)
		binary.BigEndian.PutUint32(swapped, HelloMagic)
		f.Add(swapped)
		many := bytes.Clone(b)
		many[84] = MaxHelloIPs + 1
		f.Add(many)
		v2 := bytes.Clone(b)
		v2[4] = 2
		f.Add(v2)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		h, err := ReadHello(r)
		if err != nil {
			return
		}
		consumed := data[:len(data)-r.Len()]
		out, err := h.AppendBinary(nil)
		if err != nil {
			t.Fatalf("ReadHello accepted %+v but AppendBinary refuses it: %v", h, err)
		}
		if !bytes.Equal(out, consumed) {
			t.Fatalf("re-encoding differs from the %d bytes read:\n  in % x\n out % x", len(consumed), consumed, out)
		}
		again, err := ReadHello(bytes.NewReader(out))
		if err != nil || !reflect.DeepEqual(again, h) {
			t.Fatalf("second decode: %+v, %v; want %+v", again, err, h)
		}
	})
}

func FuzzPingInfo(f *testing.F) {
	for _, p := range []PingInfo{samplePing(), {}, {Features: PingFeatBase, PID: 1, NIDs: []NIDStatus{{LoNID, NIStatusUp}}}} {
		b, err := p.AppendBinary(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(bytes.Clone(b), 0))
		f.Add(b[:len(b)-1])
		swapped := bytes.Clone(b)
		binary.BigEndian.PutUint32(swapped, PingMagic)
		f.Add(swapped)
		more := bytes.Clone(b)
		more[12]++
		f.Add(more)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p PingInfo
		if err := p.Unmarshal(data); err != nil {
			return
		}
		out, err := p.AppendBinary(nil)
		if err != nil {
			t.Fatalf("Unmarshal accepted %+v but AppendBinary refuses it: %v", p, err)
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("re-encoding differs:\n  in % x\n out % x", data, out)
		}
	})
}

func FuzzParseNID(f *testing.F) {
	for _, s := range []string{
		"192.168.1.5@tcp", "10.0.0.1@tcp1", "0@lo", "192.168.2.1@o2ib", "192.168.2.1@o2ib3",
		"[::1]@tcp", "::1@tcp", "[fd00::5]@o2ib65535", "10.0.0.1@tcp0", "10.0.0.1@tcp007",
		"", "@tcp", "1.2.3.4@", "1.2.3.4@tcpx", "1.2.3.4@tcp99999", "300.1.1.1@tcp", "1@lo",
		" 1.2.3.4@tcp", "[1.2.3.4]@tcp", "::ffff:1.2.3.4@tcp", "fe80::1%eth0@tcp", "0@lo0",
		"12345-192.168.1.5@tcp", "4294967295-0@lo", "4294967296-0@lo",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := ParseNID(s); err == nil {
			checkNID(t, n)
		}
		if p, err := ParseProcessID(s); err == nil {
			checkNID(t, p.NID)
			again, err := ParseProcessID(p.String())
			if err != nil || again != p {
				t.Fatalf("ParseProcessID(%q) = %v, %v; want %v", p.String(), again, err, p)
			}
		}
		if n, err := ParseNet(s); err == nil {
			if err := n.Validate(); err != nil {
				t.Fatalf("ParseNet(%q) = %v, which Validate rejects: %v", s, n, err)
			}
			again, err := ParseNet(n.String())
			if err != nil || again != n {
				t.Fatalf("ParseNet(%q) = %v, %v; want %v", n.String(), again, err, n)
			}
		}
	})
}

// checkNID asserts the properties every parsed NID has: it is valid, its
// text form parses back to it and is canonical, and its binary form decodes
// back to it.
func checkNID(t *testing.T, n NID) {
	t.Helper()
	if err := n.Validate(); err != nil {
		t.Fatalf("parsed NID %#v fails Validate: %v", n, err)
	}
	s := n.String()
	again, err := ParseNID(s)
	if err != nil || again != n {
		t.Fatalf("ParseNID(%q) = %#v, %v; want %#v", s, again, err, n)
	}
	if s2 := again.String(); s2 != s {
		t.Fatalf("String not canonical: %q then %q", s, s2)
	}
	var b [NIDSize]byte
	PutNID(b[:], n)
	got, err := GetNID(b[:])
	if err != nil || got != n {
		t.Fatalf("GetNID(PutNID(%v)) = %v, %v", n, got, err)
	}
}

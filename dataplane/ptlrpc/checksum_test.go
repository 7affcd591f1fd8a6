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

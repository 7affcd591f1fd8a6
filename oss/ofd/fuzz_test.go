package ofd

import (
	"testing"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// FuzzHeldGrant decodes what a client's CONNECT says of its grant: any
// bytes give a grant or an error, never a panic, and a well-formed claim
// reads back as sent.
func FuzzHeldGrant(f *testing.F) {
	for _, g := range []uint64{0, 1, 64 << 20, 1 << 62} {
		b, err := ptlrpc.Marshal(&ostv1.ConnectData{Grant: g})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add([]byte{0x08})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := heldGrant(b)
		if err != nil {
			if g != 0 {
				t.Fatalf("unreadable data %x claims %d", b, g)
			}
			return
		}
		var cd ostv1.ConnectData
		if len(b) > 0 {
			if err := ptlrpc.Unmarshal(b, &cd); err != nil || cd.Grant != g {
				t.Fatalf("%x: claim %d, decoded %d (%v)", b, g, cd.Grant, err)
			}
		}
	})
}

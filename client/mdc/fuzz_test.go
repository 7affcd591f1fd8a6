package mdc

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// FuzzReplies feeds every decoder of reply bodies the same bytes (a reply
// comes from the network): none may panic; each refuses with ErrBadReply
// or returns attributes with a sane FID, decodable layouts, and readdir
// pages in cookie order.
func FuzzReplies(f *testing.F) {
	w := &mdsv1.FID{Seq: fid.SeqNormal, Oid: 1}
	lb, _ := layout.Plain(layout.RAID0{StripeCount: 1, StripeSize: 1 << 20, StripeOffset: 0,
		Objects: []layout.Object{{OSTIndex: 0, Object: fid.FID{Seq: fid.SeqNormal + 1, Oid: 1}}}}).Marshal()
	attr := &mdsv1.Attr{Fid: w, Mode: 0o100644, Nlink: 1}
	for _, m := range []proto.Message{
		&mdsv1.GetattrReply{Attr: attr, Layout: lb, Link: []byte("x")},
		&mdsv1.ReintReply{Attr: attr, Layout: lb, OpenHandle: 5, Created: true},
		&mdsv1.ReaddirReply{Entries: []*mdsv1.DirEntry{{Name: []byte("."), Fid: w, Type: 4, Cookie: 0}, {Name: []byte("a"), Fid: w, Type: 8, Cookie: 77}}, Next: 99},
		&mdsv1.IntentReply{Attr: attr, Layout: lb, OpenHandle: 3, Negative: true},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		bad := func(what string, err error) bool {
			if err != nil && !errors.Is(err, ErrBadReply) {
				t.Fatalf("%s: %v is not ErrBadReply", what, err)
			}
			return err != nil
		}
		if a, l, _, err := getattrReply(b); !bad("getattr", err) {
			if !a.FID.IsSane() || (l != nil && l.Validate() != nil) {
				t.Fatalf("getattr accepted %+v %v", a, l)
			}
		}
		var rr mdsv1.ReintReply
		if proto.Unmarshal(b, &rr) == nil {
			if a, err := reintAttr(&rr); !bad("reint", err) && !a.FID.IsSane() {
				t.Fatalf("reint accepted %+v", a)
			}
			if o, err := openReply(&rr); !bad("open", err) && (o.Handle == 0 || !o.FID.IsSane()) {
				t.Fatalf("open accepted %+v", o)
			}
		}
		if ents, next, err := readdirReply(b); !bad("readdir", err) {
			for i, e := range ents {
				if e.Name == "" || !e.FID.IsSane() || (i > 0 && e.Cookie < ents[i-1].Cookie) {
					t.Fatalf("readdir accepted %+v", ents)
				}
			}
			if n := len(ents); n > 0 && next != DirEnd && next <= ents[n-1].Cookie {
				t.Fatalf("readdir accepted next %#x", next)
			}
		}
		if _, err := intentReply(b, 0); err != nil {
			bad("intent", err)
		}
	})
}

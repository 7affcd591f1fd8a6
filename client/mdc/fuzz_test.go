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
		&mdsv1.ReaddirReply{Entries: []*mdsv1.DirEntry{{Name: []byte("b"), Fid: w, Type: 8, Cookie: 60}, {Name: []byte("c"), Fid: w, Type: 8, Cookie: 77}}, Next: DirEnd},
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
		const from = 50
		if ents, next, err := readdirReply(b, from); !bad("readdir", err) {
			for i, e := range ents {
				if e.Name == "" || !e.FID.IsSane() || e.Cookie < from || (i > 0 && e.Cookie < ents[i-1].Cookie) {
					t.Fatalf("readdir accepted %+v", ents)
				}
			}
			if n := len(ents); n > 0 && next != DirEnd && next <= ents[n-1].Cookie || next != DirEnd && next <= from {
				t.Fatalf("readdir from %d accepted next %#x", from, next)
			}
		}
		if _, err := intentReply(b, 0); err != nil {
			bad("intent", err)
		}
	})
}

// TestReaddirReplyGoesBack: a page whose next cookie is not past the one
// it was read from (or whose entries are before it) is a bad reply: a walk
// of the directory taking it would read the same pages for ever.
func TestReaddirReplyGoesBack(t *testing.T) {
	w := &mdsv1.FID{Seq: fid.SeqNormal, Oid: 1}
	ent := func(name string, cookie uint64) *mdsv1.DirEntry {
		return &mdsv1.DirEntry{Name: []byte(name), Fid: w, Type: 8, Cookie: cookie}
	}
	for _, tc := range []struct {
		name string
		from uint64
		rep  *mdsv1.ReaddirReply
		ok   bool
	}{
		{"a page and its next", 100, &mdsv1.ReaddirReply{Entries: []*mdsv1.DirEntry{ent("a", 100), ent("b", 150)}, Next: 200}, true},
		{"the last page", 100, &mdsv1.ReaddirReply{Entries: []*mdsv1.DirEntry{ent("a", 120)}, Next: DirEnd}, true},
		{"an empty page going on", 100, &mdsv1.ReaddirReply{Next: 300}, true},
		{"next back to the start", 100, &mdsv1.ReaddirReply{Next: 0}, false},
		{"next where it was", 100, &mdsv1.ReaddirReply{Next: 100}, false},
		{"entries before the cookie", 100, &mdsv1.ReaddirReply{Entries: []*mdsv1.DirEntry{ent("a", 10), ent("b", 20)}, Next: 30}, false},
	} {
		b, err := proto.Marshal(tc.rep)
		if err != nil {
			t.Fatal(err)
		}
		ents, next, err := readdirReply(b, tc.from)
		if tc.ok {
			if err != nil || len(ents) != len(tc.rep.Entries) || next != tc.rep.Next {
				t.Errorf("%s: %v entries, next %#x, %v", tc.name, ents, next, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadReply) {
			t.Errorf("%s: %v entries, next %#x, %v; want ErrBadReply", tc.name, ents, next, err)
		}
	}
}

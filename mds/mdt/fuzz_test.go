package mdt

import (
	"errors"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// FuzzRequests feeds every decoder of request bodies the same bytes
// (each opcode's body arrives from the network as it is): none may
// panic, each either refuses with EINVAL/ERANGE or returns what the
// handlers may rely on — FIDs present and sane where required, cookies
// the store could have issued, layouts that are templates.
func FuzzRequests(f *testing.F) {
	cred := &mdsv1.Cred{Uid: 1, Gid: 2, Groups: []uint32{3}, Cap: 4, Umask: 0o22}
	w := &mdsv1.FID{Seq: fid.SeqNormal, Oid: 1}
	tmpl, _ := layout.Plain(layout.RAID0{StripeCount: -1, StripeSize: 1 << 20, StripeOffset: -1, Pool: "p"}).Marshal()
	for _, m := range []proto.Message{
		&mdsv1.GetattrRequest{Cred: cred, Fid: w, WantLayout: true},
		&mdsv1.LookupRequest{Cred: cred, Parent: w, Name: []byte("x")},
		&mdsv1.ReintRequest{Cred: cred, Time: 5, Op: &mdsv1.ReintRequest_Create{Create: &mdsv1.CreateOp{Parent: w, Name: []byte("a"), Fid: w, Mode: 0o100644, Layout: tmpl}}},
		&mdsv1.ReintRequest{Cred: cred, Op: &mdsv1.ReintRequest_Unlink{Unlink: &mdsv1.UnlinkOp{Parent: w, Name: []byte("a"), Dir: true}}},
		&mdsv1.ReintRequest{Cred: cred, Op: &mdsv1.ReintRequest_Rename{Rename: &mdsv1.RenameOp{SrcParent: w, SrcName: []byte("a"), TgtParent: w, TgtName: []byte("b"), Flags: 1}}},
		&mdsv1.ReintRequest{Cred: cred, Op: &mdsv1.ReintRequest_Link{Link: &mdsv1.LinkOp{Fid: w, Parent: w, Name: []byte("l")}}},
		&mdsv1.ReintRequest{Cred: cred, Op: &mdsv1.ReintRequest_Setattr{Setattr: &mdsv1.SetattrOp{Fid: w, Valid: 9, Size: 5}}},
		&mdsv1.ReintRequest{Cred: cred, Op: &mdsv1.ReintRequest_Setxattr{Setxattr: &mdsv1.SetxattrOp{Fid: w, Name: []byte("user.x"), Value: []byte("v"), Flags: 1}}},
		&mdsv1.ReintRequest{Cred: cred, Op: &mdsv1.ReintRequest_SetLayout{SetLayout: &mdsv1.SetLayoutOp{Fid: w, Layout: tmpl}}},
		&mdsv1.ReintRequest{Cred: cred, Op: &mdsv1.ReintRequest_Open{Open: &mdsv1.OpenOp{Parent: w, Name: []byte("o"), Flags: 0o102, Mode: 0o644, NewFid: w}}},
		&mdsv1.CloseRequest{Cred: cred, Handle: 7, Fid: w, Lsom: true, Size: 10},
		&mdsv1.ReaddirRequest{Cred: cred, Fid: w, Cookie: 12345, MaxEntries: 10},
		&mdsv1.GetxattrRequest{Cred: cred, Fid: w, List: true},
		&mdsv1.GetInfoRequest{Cred: cred, Key: []byte("fid2path"), Fid: w},
		&mdsv1.FldQueryRequest{Seq: fid.SeqNormal},
		&mdsv1.IntentRequest{Op: ItOpen | ItCreat, Cred: cred, Parent: w, Name: []byte("i"), Flags: 2, Mode: 0o600, NewFid: w, Layout: tmpl},
		&mdsv1.IntentRequest{Op: ItGetattr, Cred: cred, Fid: w},
		&mdsv1.IntentRequest{Op: ItOpen, Cred: cred, Parent: w, Flags: oTmpfile | 2, Mode: 0o600, NewFid: w},
		&mdsv1.IntentRequest{Op: ItOpen | ItCreat, Cred: cred, Parent: w, Name: []byte("k"), Flags: 0o101, Mode: 0o644, NewFid: w, KeepDirLock: 0x1234},
		&mdsv1.IntentRequest{Op: ItGetattr, Cred: cred, Parent: w, Name: []byte("k"), KeepDirLock: 0x1234},
		&mdsv1.IntentRequest{Op: ItGetattr, Cred: cred, Parent: w, Name: []byte("c"), Closes: []*mdsv1.CloseRequest{{Cred: cred, Handle: 7, Fid: w}}},
		&mdsv1.ReintRequest{Cred: cred, Closes: []*mdsv1.CloseRequest{{Cred: cred, Handle: 8, Fid: w}, {Cred: cred, Handle: 9, Fid: w, Lsom: true}},
			Op: &mdsv1.ReintRequest_Unlink{Unlink: &mdsv1.UnlinkOp{Parent: w, Name: []byte("a")}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		refused := func(what string, err error) bool {
			if err == nil {
				return false
			}
			if !errors.Is(err, errBadRequest) && !errors.Is(err, syscall.ERANGE) {
				t.Fatalf("%s: error %v is neither EINVAL nor ERANGE", what, err)
			}
			return true
		}
		sane := func(what string, f fid.FID) {
			if f.IsZero() || !f.IsSane() {
				t.Fatalf("%s: accepted FID %v", what, f)
			}
		}
		saneOrZero := func(what string, f fid.FID) {
			if !f.IsZero() {
				sane(what, f)
			}
		}
		carriedOK := func(what string, qs []closeReq) {
			if len(qs) > maxCloses {
				t.Fatalf("%s: accepted %d closes", what, len(qs))
			}
			for _, q := range qs {
				sane(what+" close", q.fid)
				if q.lsom != nil || q.mtime != 0 || q.ctime != 0 {
					t.Fatalf("%s: accepted a carried close that changes the file: %+v", what, q)
				}
			}
		}
		// A layout may name objects (a replay's, which the handlers take
		// only while the MDT recovers), but it must be valid.
		tmplOK := func(what string, l *layout.Layout) {
			if l == nil {
				return
			}
			if err := l.Validate(); err != nil {
				t.Fatalf("%s: accepted layout %v (%v)", what, l, err)
			}
		}
		if q, err := parseGetattr(b); !refused("getattr", err) {
			sane("getattr", q.fid)
		}
		if q, err := parseLookup(b); !refused("lookup", err) {
			sane("lookup", q.parent)
		}
		if q, err := parseReint(b); !refused("reint", err) {
			if q.time < 0 || q.op == nil {
				t.Fatalf("reint accepted %+v", q)
			}
			carriedOK("reint", q.closes)
			switch o := q.op.(type) {
			case *createOp:
				sane("create", o.parent)
				saneOrZero("create", o.fid)
				tmplOK("create", o.layout)
			case *unlinkOp:
				sane("unlink", o.parent)
			case *renameOp:
				sane("rename", o.sp)
				sane("rename", o.tp)
			case *linkOp:
				sane("link", o.fid)
				sane("link", o.parent)
			case *setattrOp:
				sane("setattr", o.fid)
				if o.sa.Valid == 0 || o.sa.Valid&^allAttrBits != 0 {
					t.Fatalf("setattr accepted valid %#x", o.sa.Valid)
				}
			case *setxattrOp:
				sane("setxattr", o.fid)
			case *setLayoutOp:
				sane("set layout", o.fid)
				tmplOK("set layout", &o.layout)
			case *layoutIntentOp:
				sane("layout intent", o.fid)
				if o.end <= o.start {
					t.Fatalf("layout intent accepted [%d, %d)", o.start, o.end)
				}
			case *openOp:
				if o.parent.IsZero() == o.fid.IsZero() {
					t.Fatalf("open accepted %+v", o)
				}
				tmplOK("open", o.layout)
			default:
				t.Fatalf("reint accepted op %T", o)
			}
		}
		if q, err := parseClose(b); !refused("close", err) {
			sane("close", q.fid)
		}
		if q, err := parseReaddir(b); !refused("readdir", err) {
			sane("readdir", q.fid)
			if !validCookie(q.cookie) || q.max < 1 || q.max > maxReaddirEntries {
				t.Fatalf("readdir accepted cookie %#x max %d", q.cookie, q.max)
			}
		}
		if q, err := parseGetxattr(b); !refused("getxattr", err) {
			sane("getxattr", q.fid)
		}
		if q, err := parseGetInfo(b); !refused("get_info", err) {
			sane("get_info", q.fid)
		}
		_, err := parseFLD(b)
		refused("fld", err)
		if q, err := parseIntent(b); !refused("intent", err) {
			if q.op == 0 || q.op&^itAll != 0 || q.time < 0 {
				t.Fatalf("intent accepted %+v", q)
			}
			saneOrZero("intent", q.parent)
			saneOrZero("intent", q.fid)
			tmplOK("intent", q.layout)
			if q.op&ItOpen != 0 && q.open == nil {
				t.Fatalf("open intent without an open")
			}
			if q.open != nil && q.open.keepDirLock != 0 && (q.open.parent.IsZero() || q.open.flags&oCreat == 0) {
				t.Fatalf("intent keeps directory locks without a create by name: %+v", q.open)
			}
			if o := q.open; o != nil && tmpfile(o.flags) && (o.parent.IsZero() || o.name != "" || o.newFID.IsZero() || o.flags&oCreat != 0 || o.flags&3 == 0) {
				t.Fatalf("O_TMPFILE open accepted without a directory, with a name, without a new FID, with O_CREAT or for read only: %+v", o)
			}
			carriedOK("intent", q.closes)
		}
	})
}

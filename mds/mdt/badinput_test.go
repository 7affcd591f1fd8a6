package mdt

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
	ldlmv1 "github.com/nacrefs/nacre/proto/nacre/ldlm/v1"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

func pb(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshot is what must not change: the namespace under the root, the
// inode count, the last transno the store applied.
func snapshot(t testing.TB, c *cluster) string {
	var b strings.Builder
	var walk func(d fid.FID, path string)
	walk = func(d fid.FID, path string) {
		cookie := uint64(0)
		for cookie != mdd.DirEnd {
			ents, next, err := c.mdt.Store().Readdir(mdd.Req{Cred: mdd.Root()}, d, cookie, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if e.Name == "." || e.Name == ".." {
					continue
				}
				a, err := c.mdt.Store().Getattr(e.FID)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "%s/%s %v %o %d %d\n", path, e.Name, e.FID, a.Mode, a.Nlink, a.Ctime)
				if e.Type == mdd.DTDir {
					walk(e.FID, path+"/"+e.Name)
				}
			}
			cookie = next
		}
	}
	walk(mdd.RootFID, "")
	st, _ := c.mdt.Store().Statfs()
	fmt.Fprintf(&b, "ffree %d transno %d", st.Ffree, c.mdt.Store().LastTransno())
	return b.String()
}

// TestBadInput: malformed bodies, names, FIDs that do not exist or belong
// elsewhere, cookies never issued, unknown handles: each gets a clear
// errno and changes nothing.
func TestBadInput(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	m := n.mdc
	r := n.root
	d, err := m.Mkdir(ctx, root, r, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	f, l, err := m.Create(ctx, root, d.FID, "f", 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	ostObj := objectsOf(l)[0].Object
	// A sequence the FLD gives to another MDT, and one nobody has.
	other, err := c.mdt.Store().AllocSuperSeq(mdd.TargetMDT, 1)
	if err != nil {
		t.Fatal(err)
	}
	remote := fid.FID{Seq: other.Start, Oid: 1}
	unknown := fid.FID{Seq: 0x7000_0000_0000, Oid: 1}
	missing := fid.FID{Seq: f.FID.Seq, Oid: f.FID.Oid + 1000}
	insane := fid.FID{Seq: f.FID.Seq, Oid: 1, Ver: 3}
	idif, _ := fid.IDIF(5, 1)
	cred := &mdsv1.Cred{}
	w := func(f fid.FID) *mdsv1.FID { return &mdsv1.FID{Seq: f.Seq, Oid: f.Oid, Ver: f.Ver} }
	reint := func(op isReint) []byte { req := &mdsv1.ReintRequest{Cred: cred}; op.apply(req); return pb(t, req) }
	tmpl, _ := layout.Plain(layout.RAID0{StripeCount: 1, StripeSize: 1 << 20, StripeOffset: -1}).Marshal()
	withObj, _ := layout.Plain(layout.RAID0{StripeCount: 1, StripeSize: 1 << 20, StripeOffset: -1,
		Objects: []layout.Object{{OSTIndex: 0, Object: ostObj}}}).Marshal()
	if c.mdt.Sync() != nil {
		t.Fatal("sync")
	}
	before := snapshot(t, c)

	tests := []struct {
		name string
		op   wire.Opcode
		body []byte
		want syscall.Errno
	}{
		{"garbage getattr", wire.MDSGetattr, []byte{0xff, 0xff, 0x01}, syscall.EINVAL},
		{"getattr without a credential", wire.MDSGetattr, pb(t, &mdsv1.GetattrRequest{Fid: w(f.FID)}), syscall.EINVAL},
		{"getattr without a FID", wire.MDSGetattr, pb(t, &mdsv1.GetattrRequest{Cred: cred}), syscall.EINVAL},
		{"getattr of a missing FID", wire.MDSGetattr, pb(t, &mdsv1.GetattrRequest{Cred: cred, Fid: w(missing)}), syscall.ENOENT},
		{"getattr of an insane FID", wire.MDSGetattr, pb(t, &mdsv1.GetattrRequest{Cred: cred, Fid: w(insane)}), syscall.EINVAL},
		{"getattr of another MDT's FID", wire.MDSGetattr, pb(t, &mdsv1.GetattrRequest{Cred: cred, Fid: w(remote)}), syscall.EREMOTE},
		{"getattr of a FID nobody was granted", wire.MDSGetattr, pb(t, &mdsv1.GetattrRequest{Cred: cred, Fid: w(unknown)}), syscall.ENOENT},
		{"getattr of an OST object", wire.MDSGetattr, pb(t, &mdsv1.GetattrRequest{Cred: cred, Fid: w(ostObj)}), syscall.EINVAL},
		{"getattr of an IDIF FID", wire.MDSGetattr, pb(t, &mdsv1.GetattrRequest{Cred: cred, Fid: w(idif)}), syscall.EINVAL},
		{"lookup of an empty name", wire.MDSGetattrName, pb(t, &mdsv1.LookupRequest{Cred: cred, Parent: w(d.FID)}), syscall.EINVAL},
		{"lookup of a name with a slash", wire.MDSGetattrName, pb(t, &mdsv1.LookupRequest{Cred: cred, Parent: w(d.FID), Name: []byte("a/b")}), syscall.EINVAL},
		{"lookup of a name with a NUL", wire.MDSGetattrName, pb(t, &mdsv1.LookupRequest{Cred: cred, Parent: w(d.FID), Name: []byte("a\x00b")}), syscall.EINVAL},
		{"lookup of a long name", wire.MDSGetattrName, pb(t, &mdsv1.LookupRequest{Cred: cred, Parent: w(d.FID), Name: []byte(strings.Repeat("a", 256))}), syscall.ENAMETOOLONG},
		{"lookup in a missing dir", wire.MDSGetattrName, pb(t, &mdsv1.LookupRequest{Cred: cred, Parent: w(missing), Name: []byte("a")}), syscall.ENOENT},
		{"reint without an op", wire.MDSReint, pb(t, &mdsv1.ReintRequest{Cred: cred}), syscall.EINVAL},
		{"garbage reint", wire.MDSReint, []byte("\x0a\x05hello"), syscall.EINVAL},
		{"create with a slash", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a/b"), Mode: syscall.S_IFREG | 0o644}}), syscall.EINVAL},
		{"create with a NUL", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a\x00"), Mode: syscall.S_IFREG | 0o644}}), syscall.EINVAL},
		{"create named dot", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("."), Mode: syscall.S_IFDIR | 0o755}}), syscall.EEXIST},
		{"create named empty", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Mode: syscall.S_IFREG | 0o644}}), syscall.EINVAL},
		{"create long name", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte(strings.Repeat("a", 300)), Mode: syscall.S_IFREG | 0o644}}), syscall.ENAMETOOLONG},
		{"create in a missing dir", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(missing), Name: []byte("a"), Mode: syscall.S_IFREG | 0o644}}), syscall.ENOENT},
		{"create with a FID of a sequence not granted", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a"), Fid: w(unknown), Mode: syscall.S_IFREG | 0o644}}), syscall.EINVAL},
		{"create with a FID in use", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a"), Fid: w(f.FID), Mode: syscall.S_IFREG | 0o644}}), syscall.EEXIST},
		{"create with another MDT's FID", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a"), Fid: w(remote), Mode: syscall.S_IFREG | 0o644}}), syscall.EINVAL},
		{"create with a corrupt layout", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a"), Mode: syscall.S_IFREG | 0o644, Layout: []byte("NLOVgarbage")}}), syscall.EINVAL},
		{"create with a layout naming objects", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a"), Mode: syscall.S_IFREG | 0o644, Layout: withObj}}), syscall.EINVAL},
		{"mkdir with a layout", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a"), Mode: syscall.S_IFDIR | 0o755, Layout: tmpl}}), syscall.EINVAL},
		{"create of an unknown type", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a"), Mode: 0o170000}}), syscall.EINVAL},
		{"symlink with a NUL", wire.MDSReint, reint(create{&mdsv1.CreateOp{Parent: w(d.FID), Name: []byte("a"), Mode: syscall.S_IFLNK | 0o777, Target: []byte("x\x00y")}}), syscall.EINVAL},
		{"unlink of a name with a slash", wire.MDSReint, reint(unlink{&mdsv1.UnlinkOp{Parent: w(d.FID), Name: []byte("f/")}}), syscall.EINVAL},
		{"unlink of ..", wire.MDSReint, reint(unlink{&mdsv1.UnlinkOp{Parent: w(d.FID), Name: []byte("..")}}), syscall.EINVAL},
		{"rmdir of ..", wire.MDSReint, reint(unlink{&mdsv1.UnlinkOp{Parent: w(d.FID), Name: []byte(".."), Dir: true}}), syscall.ENOTEMPTY},
		{"rename with an empty target name", wire.MDSReint, reint(rename{&mdsv1.RenameOp{SrcParent: w(d.FID), SrcName: []byte("f"), TgtParent: w(d.FID)}}), syscall.EINVAL},
		{"rename into a missing dir", wire.MDSReint, reint(rename{&mdsv1.RenameOp{SrcParent: w(d.FID), SrcName: []byte("f"), TgtParent: w(missing), TgtName: []byte("g")}}), syscall.ENOENT},
		{"rename with both flags", wire.MDSReint, reint(rename{&mdsv1.RenameOp{SrcParent: w(d.FID), SrcName: []byte("f"), TgtParent: w(d.FID), TgtName: []byte("g"), Flags: 3}}), syscall.EINVAL},
		{"rename with unknown flags", wire.MDSReint, reint(rename{&mdsv1.RenameOp{SrcParent: w(d.FID), SrcName: []byte("f"), TgtParent: w(d.FID), TgtName: []byte("g"), Flags: 8}}), syscall.EINVAL},
		{"rename of the directory into itself", wire.MDSReint, reint(rename{&mdsv1.RenameOp{SrcParent: w(r), SrcName: []byte("d"), TgtParent: w(d.FID), TgtName: []byte("d")}}), syscall.EINVAL},
		{"link of a missing FID", wire.MDSReint, reint(link{&mdsv1.LinkOp{Fid: w(missing), Parent: w(d.FID), Name: []byte("l")}}), syscall.ENOENT},
		{"link of another MDT's FID", wire.MDSReint, reint(link{&mdsv1.LinkOp{Fid: w(remote), Parent: w(d.FID), Name: []byte("l")}}), syscall.EREMOTE},
		{"setattr of nothing", wire.MDSReint, reint(setattr{&mdsv1.SetattrOp{Fid: w(f.FID)}}), syscall.EINVAL},
		{"setattr with unknown bits", wire.MDSReint, reint(setattr{&mdsv1.SetattrOp{Fid: w(f.FID), Valid: 1 << 20}}), syscall.EINVAL},
		{"setattr of a missing FID", wire.MDSReint, reint(setattr{&mdsv1.SetattrOp{Fid: w(missing), Valid: mdd.AttrMode}}), syscall.ENOENT},
		{"setxattr with unknown flags", wire.MDSReint, reint(setxattr{&mdsv1.SetxattrOp{Fid: w(f.FID), Name: []byte("user.a"), Flags: 4}}), syscall.EINVAL},
		{"setxattr with a long name", wire.MDSReint, reint(setxattr{&mdsv1.SetxattrOp{Fid: w(f.FID), Name: []byte("user." + strings.Repeat("a", 300))}}), syscall.ERANGE},
		{"setxattr of a bad ACL", wire.MDSReint, reint(setxattr{&mdsv1.SetxattrOp{Fid: w(f.FID), Name: []byte(mdd.XattrACLAccess), Value: []byte{2, 0, 0, 0, 1}}}), syscall.EINVAL},
		{"layout intent naming a layout, not replayed", wire.MDSReint, reint(layoutIntent{&mdsv1.LayoutIntentOp{Fid: w(f.FID), Start: 0, End: 1 << 20, Layout: withObj}}), syscall.EINVAL},
		{"layout intent with a corrupt layout", wire.MDSReint, reint(layoutIntent{&mdsv1.LayoutIntentOp{Fid: w(f.FID), Start: 0, End: 1 << 20, Layout: []byte("NLOVgarbage")}}), syscall.EINVAL},
		{"set layout naming objects, not replayed", wire.MDSReint, reint(setLayout{&mdsv1.SetLayoutOp{Fid: w(f.FID), Layout: withObj}}), syscall.EINVAL},
		{"set a directory's layout naming objects", wire.MDSReint, reint(setLayout{&mdsv1.SetLayoutOp{Fid: w(d.FID), Layout: withObj}}), syscall.EINVAL},
		{"set layout without a layout", wire.MDSReint, reint(setLayout{&mdsv1.SetLayoutOp{Fid: w(d.FID)}}), syscall.EINVAL},
		{"set layout of a missing file", wire.MDSReint, reint(setLayout{&mdsv1.SetLayoutOp{Fid: w(missing), Layout: tmpl}}), syscall.ENOENT},
		{"open of nothing", wire.MDSReint, reint(open{&mdsv1.OpenOp{}}), syscall.EINVAL},
		{"open by FID and name", wire.MDSReint, reint(open{&mdsv1.OpenOp{Parent: w(d.FID), Name: []byte("f"), Fid: w(f.FID)}}), syscall.EINVAL},
		{"open by FID with O_CREAT", wire.MDSReint, reint(open{&mdsv1.OpenOp{Fid: w(f.FID), Flags: syscall.O_CREAT}}), syscall.EINVAL},
		{"open of a missing FID", wire.MDSReint, reint(open{&mdsv1.OpenOp{Fid: w(missing)}}), syscall.ENOENT},
		{"O_TMPFILE open with a name", wire.MDSReint, reint(open{&mdsv1.OpenOp{Parent: w(d.FID), Name: []byte("t"), Flags: unix.O_TMPFILE | syscall.O_RDWR, NewFid: w(missing)}}), syscall.EINVAL},
		{"O_TMPFILE open without a new FID", wire.MDSReint, reint(open{&mdsv1.OpenOp{Parent: w(d.FID), Flags: unix.O_TMPFILE | syscall.O_RDWR}}), syscall.EINVAL},
		{"O_TMPFILE open with O_CREAT", wire.MDSReint, reint(open{&mdsv1.OpenOp{Parent: w(d.FID), Flags: unix.O_TMPFILE | syscall.O_RDWR | syscall.O_CREAT, NewFid: w(missing)}}), syscall.EINVAL},
		{"O_TMPFILE open for read only", wire.MDSReint, reint(open{&mdsv1.OpenOp{Parent: w(d.FID), Flags: unix.O_TMPFILE, NewFid: w(missing)}}), syscall.EINVAL},
		{"O_TMPFILE open in a file", wire.MDSReint, reint(open{&mdsv1.OpenOp{Parent: w(f.FID), Flags: unix.O_TMPFILE | syscall.O_RDWR, NewFid: w(missing)}}), syscall.ENOTDIR},
		{"swap layouts without FIDs", wire.MDSSwapLayouts, pb(t, &mdsv1.SwapLayoutsRequest{Cred: cred}), syscall.EINVAL},
		{"swap layouts with a directory", wire.MDSSwapLayouts, pb(t, &mdsv1.SwapLayoutsRequest{Cred: cred, Fid1: w(f.FID), Fid2: w(d.FID)}), syscall.EINVAL},
		{"swap layouts with a missing FID", wire.MDSSwapLayouts, pb(t, &mdsv1.SwapLayoutsRequest{Cred: cred, Fid1: w(f.FID), Fid2: w(missing)}), syscall.ENOENT},
		{"swap layouts of a file with itself", wire.MDSSwapLayouts, pb(t, &mdsv1.SwapLayoutsRequest{Cred: cred, Fid1: w(f.FID), Fid2: w(f.FID)}), syscall.EINVAL},
		{"open replay outside recovery", wire.MDSReint, reint(open{&mdsv1.OpenOp{Fid: w(f.FID), ReplayHandle: 77}}), syscall.EPROTO},
		{"open replay with O_TRUNC", wire.MDSReint, reint(open{&mdsv1.OpenOp{Fid: w(f.FID), Flags: syscall.O_TRUNC | syscall.O_WRONLY, ReplayHandle: 77}}), syscall.EINVAL},
		{"open replay by name", wire.MDSReint, reint(open{&mdsv1.OpenOp{Parent: w(d.FID), Name: []byte("f"), ReplayHandle: 77}}), syscall.EINVAL},
		{"close of a handle never issued", wire.MDSClose, pb(t, &mdsv1.CloseRequest{Cred: cred, Fid: w(f.FID), Handle: 12345}), syscall.EBADF},
		{"close without a FID", wire.MDSClose, pb(t, &mdsv1.CloseRequest{Cred: cred, Handle: 12345}), syscall.EINVAL},
		{"readdir from a cookie never issued", wire.MDSReadpage, pb(t, &mdsv1.ReaddirRequest{Cred: cred, Fid: w(d.FID), Cookie: 1<<63 + 5}), syscall.EINVAL},
		{"readdir from the last cookie", wire.MDSReadpage, pb(t, &mdsv1.ReaddirRequest{Cred: cred, Fid: w(d.FID), Cookie: ^uint64(0)}), syscall.EINVAL},
		{"readdir of a missing dir", wire.MDSReadpage, pb(t, &mdsv1.ReaddirRequest{Cred: cred, Fid: w(missing)}), syscall.ENOENT},
		{"getxattr list with a name", wire.MDSGetxattr, pb(t, &mdsv1.GetxattrRequest{Cred: cred, Fid: w(f.FID), Name: []byte("user.a"), List: true}), syscall.EINVAL},
		{"getxattr of a bad name", wire.MDSGetxattr, pb(t, &mdsv1.GetxattrRequest{Cred: cred, Fid: w(f.FID), Name: []byte("nonamespace")}), syscall.EOPNOTSUPP},
		{"get_info of an unknown key", wire.MDSGetInfo, pb(t, &mdsv1.GetInfoRequest{Cred: cred, Key: []byte("bogus"), Fid: w(f.FID)}), syscall.EINVAL},
		{"fid2path of a missing FID", wire.MDSGetInfo, pb(t, &mdsv1.GetInfoRequest{Cred: &mdsv1.Cred{Cap: mdd.CapRoot}, Key: []byte("fid2path"), Fid: w(missing)}), syscall.ENOENT},
		{"garbage fld query", wire.FLDQuery, []byte{0x09, 0x01}, syscall.EINVAL},
		{"credential with too many groups", wire.MDSGetattr, pb(t, &mdsv1.GetattrRequest{Cred: &mdsv1.Cred{Groups: make([]uint32, maxGroups+1)}, Fid: w(f.FID)}), syscall.EINVAL},
	}
	for _, tt := range tests {
		_, err := n.imp.Do(ctx, &ptlrpc.Req{Opcode: tt.op, Body: tt.body})
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	// Intents with bad bodies get their errno in the intent status and no
	// lock.
	res := ldlm.Resource{ID: ldlm.ResIDOfFID(r.Seq, r.Oid, r.Ver), Type: ldlm.TypeIBits}
	for _, it := range []struct {
		name string
		body []byte
		want syscall.Errno
	}{
		{"garbage", []byte{0xff}, syscall.EINVAL},
		{"no op", pb(t, &mdsv1.IntentRequest{Cred: cred, Parent: w(r), Name: []byte("d")}), syscall.EINVAL},
		{"unknown op", pb(t, &mdsv1.IntentRequest{Op: 1 << 9, Cred: cred, Parent: w(r), Name: []byte("d")}), syscall.EINVAL},
		{"lookup of nothing", pb(t, &mdsv1.IntentRequest{Op: ItLookup, Cred: cred}), syscall.EINVAL},
		{"lookup by FID with a name", pb(t, &mdsv1.IntentRequest{Op: ItLookup, Cred: cred, Fid: w(f.FID), Name: []byte("x")}), syscall.EINVAL},
		{"getattr of a missing FID", pb(t, &mdsv1.IntentRequest{Op: ItGetattr, Cred: cred, Fid: w(missing)}), syscall.ENOENT},
		{"lookup in another MDT's dir", pb(t, &mdsv1.IntentRequest{Op: ItLookup, Cred: cred, Parent: w(remote), Name: []byte("x")}), syscall.EREMOTE},
		{"lookup of a long name", pb(t, &mdsv1.IntentRequest{Op: ItLookup, Cred: cred, Parent: w(r), Name: []byte(strings.Repeat("x", 256))}), syscall.ENAMETOOLONG},
		{"create without a parent", pb(t, &mdsv1.IntentRequest{Op: ItCreat, Cred: cred, Name: []byte("x")}), syscall.EINVAL},
		{"open-create with a slash", pb(t, &mdsv1.IntentRequest{Op: ItOpen | ItCreat, Cred: cred, Parent: w(d.FID), Name: []byte("x/y"), Mode: 0o644}), syscall.EINVAL},
	} {
		body := pb(t, &ldlmv1.EnqueueRequest{Resource: &ldlmv1.Resource{Id: res.ID[:], Type: uint32(res.Type)}, Mode: uint32(ldlm.PR),
			Policy: &ldlmv1.Policy{Bits: uint64(ldlm.BitLookup)}, ClientHandle: 1, Intent: it.body})
		b, err := n.imp.Do(ctx, &ptlrpc.Req{Opcode: wire.LDLMEnqueue, Body: body})
		var rep ldlmv1.EnqueueReply
		if err == nil {
			err = proto.Unmarshal(b, &rep)
		}
		if err != nil || rep.Handle != 0 || syscall.Errno(-rep.IntentStatus) != it.want {
			t.Errorf("intent %s: %v, status %d, lock %#x; want %v", it.name, err, rep.IntentStatus, rep.Handle, it.want)
		}
	}
	// mdc refuses what it should not send, too.
	if _, err := m.Mknod(ctx, root, d.FID, "x", syscall.S_IFDIR, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("mdc mknod of a directory: %v", err)
	}
	if err := c.mdt.Sync(); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, c); after != before {
		t.Fatalf("bad requests changed the namespace:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if c.mdt.Stats().Opens != 0 || len(c.mdt.LockServer().Locks(res)) != 0 {
		t.Fatalf("bad requests left opens %d or locks %v", c.mdt.Stats().Opens, c.mdt.LockServer().Locks(res))
	}
	if lo := c.mdt.Store().LastObjects()[0]; lo.Oid != ostObj.Oid {
		t.Fatalf("bad requests took objects: last object %v, the file's %v", lo, ostObj)
	}
	c.check()
}

// isReint sets a reint's operation (test helper).
type isReint interface{ apply(*mdsv1.ReintRequest) }

type (
	create       struct{ *mdsv1.CreateOp }
	unlink       struct{ *mdsv1.UnlinkOp }
	rename       struct{ *mdsv1.RenameOp }
	link         struct{ *mdsv1.LinkOp }
	setattr      struct{ *mdsv1.SetattrOp }
	setxattr     struct{ *mdsv1.SetxattrOp }
	setLayout    struct{ *mdsv1.SetLayoutOp }
	layoutIntent struct{ *mdsv1.LayoutIntentOp }
	open         struct{ *mdsv1.OpenOp }
)

func (o layoutIntent) apply(r *mdsv1.ReintRequest) {
	r.Op = &mdsv1.ReintRequest_LayoutIntent{LayoutIntent: o.LayoutIntentOp}
}

func (o create) apply(r *mdsv1.ReintRequest) { r.Op = &mdsv1.ReintRequest_Create{Create: o.CreateOp} }
func (o unlink) apply(r *mdsv1.ReintRequest) { r.Op = &mdsv1.ReintRequest_Unlink{Unlink: o.UnlinkOp} }
func (o rename) apply(r *mdsv1.ReintRequest) { r.Op = &mdsv1.ReintRequest_Rename{Rename: o.RenameOp} }
func (o link) apply(r *mdsv1.ReintRequest)   { r.Op = &mdsv1.ReintRequest_Link{Link: o.LinkOp} }
func (o setattr) apply(r *mdsv1.ReintRequest) {
	r.Op = &mdsv1.ReintRequest_Setattr{Setattr: o.SetattrOp}
}
func (o setxattr) apply(r *mdsv1.ReintRequest) {
	r.Op = &mdsv1.ReintRequest_Setxattr{Setxattr: o.SetxattrOp}
}
func (o setLayout) apply(r *mdsv1.ReintRequest) {
	r.Op = &mdsv1.ReintRequest_SetLayout{SetLayout: o.SetLayoutOp}
}
func (o open) apply(r *mdsv1.ReintRequest) { r.Op = &mdsv1.ReintRequest_Open{Open: o.OpenOp} }

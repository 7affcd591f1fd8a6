package mdt

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/ldlm"
	"github.com/nacrefs/nacre/mds/mdd"
)

// TestInodeFlags: the MDT enforces FS_IMMUTABLE_FL and FS_APPEND_FL on
// every request that reaches it, from any client, root's too: opens for
// write (by name, by FID, by intent), truncates, attribute and xattr
// changes, and the namespace.
func TestInodeFlags(t *testing.T) {
	c := newCluster(t, 0, nil)
	n, other := c.client(), c.client()
	ctx := ctxT(t, time.Minute)
	m := n.mdc
	alice := user(1000, 1000)
	pub, err := m.Mkdir(ctx, root, n.root, "pub", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := m.Create(ctx, alice, pub.FID, "f", 0o666, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Setattr(ctx, alice, f.FID, mdc.SetAttr{Valid: mdc.AttrSize, Size: 5}); err != nil {
		t.Fatal(err)
	}
	if err := m.Setxattr(ctx, alice, f.FID, "user.a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	_, err = m.Setattr(ctx, alice, f.FID, mdc.SetAttr{Valid: mdc.AttrFlags, Flags: mdd.FlagImmutable})
	wantErrno(t, "chattr +i without CAP_LINUX_IMMUTABLE", err, syscall.EPERM)
	if a, err := m.Setattr(ctx, root, f.FID, mdc.SetAttr{Valid: mdc.AttrFlags, Flags: mdd.FlagImmutable}); err != nil || a.Flags != mdd.FlagImmutable {
		t.Fatalf("chattr +i: flags %#x, %v", a.Flags, err)
	}
	before, err := other.mdc.Getattr(ctx, root, f.FID)
	if err != nil {
		t.Fatal(err)
	}
	if before.Flags != mdd.FlagImmutable || before.Size != 5 {
		t.Fatalf("the other client sees flags %#x size %d", before.Flags, before.Size)
	}
	for _, cl := range []*node{n, other} {
		m := cl.mdc
		for _, who := range []mdc.Cred{root, alice} {
			for _, tt := range []struct {
				name string
				op   func() error
			}{
				{"open O_WRONLY", func() error { _, err := m.Open(ctx, who, pub.FID, "f", syscall.O_WRONLY, 0, nil); return err }},
				{"open O_WRONLY|O_APPEND", func() error {
					_, err := m.Open(ctx, who, pub.FID, "f", syscall.O_WRONLY|syscall.O_APPEND, 0, nil)
					return err
				}},
				{"open O_RDONLY|O_TRUNC", func() error {
					_, err := m.Open(ctx, who, pub.FID, "f", syscall.O_RDONLY|syscall.O_TRUNC, 0, nil)
					return err
				}},
				{"open O_CREAT|O_RDWR", func() error {
					_, err := m.Open(ctx, who, pub.FID, "f", syscall.O_CREAT|syscall.O_RDWR, 0o644, nil)
					return err
				}},
				{"open by FID O_RDWR", func() error { _, err := m.OpenFID(ctx, who, f.FID, syscall.O_RDWR); return err }},
				{"open intent O_WRONLY", func() error {
					_, err := m.Enqueue(ctx, who, mdc.Intent{Op: mdc.ItOpen, Parent: pub.FID, Name: "f", Flags: syscall.O_WRONLY}, ldlm.Hooks{})
					return err
				}},
				{"truncate", func() error { _, err := m.Setattr(ctx, who, f.FID, mdc.SetAttr{Valid: mdc.AttrSize}); return err }},
				{"ftruncate", func() error {
					_, err := m.Setattr(ctx, who, f.FID, mdc.SetAttr{Valid: mdc.AttrSize | mdc.AttrOpenWrite})
					return err
				}},
				{"chmod", func() error {
					_, err := m.Setattr(ctx, who, f.FID, mdc.SetAttr{Valid: mdc.AttrMode, Mode: 0o600})
					return err
				}},
				{"touch", func() error { _, err := m.Setattr(ctx, who, f.FID, mdc.SetAttr{Valid: mdc.AttrMtimeNow}); return err }},
				{"setxattr", func() error { return m.Setxattr(ctx, who, f.FID, "user.a", []byte("2"), 0) }},
				{"removexattr", func() error { return m.Removexattr(ctx, who, f.FID, "user.a") }},
				{"unlink", func() error { return m.Unlink(ctx, who, pub.FID, "f") }},
				{"rename", func() error { return m.Rename(ctx, who, pub.FID, "f", pub.FID, "g", 0) }},
				{"link", func() error { _, err := m.Link(ctx, who, f.FID, pub.FID, "h"); return err }},
			} {
				wantErrno(t, tt.name+" of an immutable file by uid "+itoa(int(who.UID)), tt.op(), syscall.EPERM)
			}
		}
	}
	if c.mdt.Stats().Opens != 0 {
		t.Fatalf("%d opens left after refused opens", c.mdt.Stats().Opens)
	}
	// Reads work.
	rd, err := other.mdc.Open(ctx, alice, pub.FID, "f", syscall.O_RDONLY, 0, nil)
	if err != nil {
		t.Fatalf("open for read: %v", err)
	}
	if err := other.mdc.Close(ctx, alice, rd, nil); err != nil {
		t.Fatal(err)
	}
	after, err := m.Getattr(ctx, root, f.FID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size != 5 || after.Mode != before.Mode || after.Mtime != before.Mtime || after.Ctime != before.Ctime || after.Nlink != 1 {
		t.Fatalf("attributes changed: %+v, was %+v", after, before)
	}
	if v, err := m.Getxattr(ctx, root, f.FID, "user.a"); err != nil || string(v) != "1" {
		t.Fatalf("user.a = %q, %v", v, err)
	}
	for _, name := range []string{"g", "h"} {
		_, err := m.Lookup(ctx, root, pub.FID, name)
		wantErrno(t, "lookup "+name, err, syscall.ENOENT)
	}

	// Append-only (root trades one flag for the other): writes with
	// O_APPEND only, and the file keeps its size and its name.
	if _, err := m.Setattr(ctx, root, f.FID, mdc.SetAttr{Valid: mdc.AttrFlags, Flags: mdd.FlagAppend}); err != nil {
		t.Fatal(err)
	}
	_, err = other.mdc.Open(ctx, alice, pub.FID, "f", syscall.O_WRONLY, 0, nil)
	wantErrno(t, "open O_WRONLY of an append-only file", err, syscall.EPERM)
	_, err = other.mdc.Open(ctx, alice, pub.FID, "f", syscall.O_WRONLY|syscall.O_APPEND|syscall.O_TRUNC, 0, nil)
	wantErrno(t, "open O_APPEND|O_TRUNC of an append-only file", err, syscall.EPERM)
	_, err = other.mdc.Setattr(ctx, root, f.FID, mdc.SetAttr{Valid: mdc.AttrSize | mdc.AttrOpenWrite, Size: 1})
	wantErrno(t, "truncate an append-only file", err, syscall.EPERM)
	wantErrno(t, "unlink an append-only file", other.mdc.Unlink(ctx, root, pub.FID, "f"), syscall.EPERM)
	wr, err := other.mdc.Open(ctx, alice, pub.FID, "f", syscall.O_WRONLY|syscall.O_APPEND, 0, nil)
	if err != nil {
		t.Fatalf("open O_WRONLY|O_APPEND of an append-only file: %v", err)
	}
	if err := other.mdc.Close(ctx, alice, wr, nil); err != nil {
		t.Fatal(err)
	}
	if a, err := m.Getattr(ctx, root, f.FID); err != nil || a.Size != 5 || a.Nlink != 1 || a.Flags != mdd.FlagAppend {
		t.Fatalf("append-only file: %+v, %v", a, err)
	}

	// An append-only directory takes entries and keeps them.
	d, err := m.Mkdir(ctx, root, n.root, "log", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Setattr(ctx, root, d.FID, mdc.SetAttr{Valid: mdc.AttrFlags, Flags: mdd.FlagAppend}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.mdc.Create(ctx, alice, d.FID, "1", 0o644, nil); err != nil {
		t.Fatalf("create in an append-only directory: %v", err)
	}
	wantErrno(t, "unlink in an append-only directory", other.mdc.Unlink(ctx, alice, d.FID, "1"), syscall.EPERM)
	wantErrno(t, "rename out of an append-only directory", other.mdc.Rename(ctx, alice, d.FID, "1", pub.FID, "1", 0), syscall.EPERM)
	if _, err := m.Lookup(ctx, root, d.FID, "1"); err != nil {
		t.Fatalf("the entry after refused removals: %v", err)
	}
	c.check()
}

// TestACLEdgesOverRPC: the POSIX ACL cases where Linux's set_posix_acl
// decides, through the MDT.
func TestACLEdgesOverRPC(t *testing.T) {
	c := newCluster(t, 0, nil)
	n := c.client()
	ctx := ctxT(t, time.Minute)
	m := n.mdc
	alice := user(1000, 1000)
	pub, err := m.Mkdir(ctx, root, n.root, "pub", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := m.Create(ctx, alice, pub.FID, "f", 0o640, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Symlink(ctx, alice, pub.FID, "l", "f")
	if err != nil {
		t.Fatal(err)
	}
	acl := new(bytes.Buffer)
	binary.Write(acl, binary.LittleEndian, uint32(2))
	for _, e := range [][3]uint32{{1, 6, 0xffffffff}, {2, 6, 7}, {4, 4, 0xffffffff}, {0x10, 6, 0xffffffff}, {0x20, 0, 0xffffffff}} {
		binary.Write(acl, binary.LittleEndian, uint16(e[0]))
		binary.Write(acl, binary.LittleEndian, uint16(e[1]))
		binary.Write(acl, binary.LittleEndian, e[2])
	}
	wantErrno(t, "an ACL on a symlink", m.Setxattr(ctx, alice, l.FID, mdd.XattrACLAccess, acl.Bytes(), 0), syscall.EOPNOTSUPP)
	if a, err := m.Getattr(ctx, root, l.FID); err != nil || a.Mode != syscall.S_IFLNK|0o777 {
		t.Fatalf("symlink mode %#o, %v", a.Mode, err)
	}
	wantErrno(t, "remove a file's default ACL", m.Removexattr(ctx, alice, f.FID, mdd.XattrACLDefault), 0)
	if err := m.Setxattr(ctx, alice, f.FID, mdd.XattrACLAccess, acl.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "an empty access ACL", m.Setxattr(ctx, alice, f.FID, mdd.XattrACLAccess, nil, 0), 0)
	_, err = m.Getxattr(ctx, alice, f.FID, mdd.XattrACLAccess)
	wantErrno(t, "the ACL after an empty value", err, syscall.ENODATA)
	if a, err := m.Getattr(ctx, root, f.FID); err != nil || a.Mode&0o777 != 0o660 {
		t.Fatalf("mode after the ACL went %#o, %v; want 0660 as the ACL left it", a.Mode&0o777, err)
	}
	c.check()
}

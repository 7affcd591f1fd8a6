package mdt

import (
	"context"
	"fmt"
	"syscall"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/mds/mdd"
	mdsv1 "github.com/nacrefs/nacre/proto/nacre/mds/v1"
)

// Changelog readers (lfs changelog, the HSM policy engine, lctl): records
// are read from an index with LLOG_ORIGIN_HANDLE_NEXT_BLOCK and cleared
// per user with MDS_CHANGELOG_CLEAR; both need CAP_SYS_ADMIN, as Lustre's
// changelog ioctls do. Users are registered on the MDS (lctl
// changelog_register, the mdd.*.changelog_users parameter).

// maxChangelogBatch bounds the records of one read (a reply fits 64 KiB
// with names of 255 bytes).
const maxChangelogBatch = 100

// adminCred checks that a request for what comes with CAP_SYS_ADMIN.
func adminCred(w *mdsv1.Cred, what string) error {
	cred, err := credFrom(w)
	if err != nil {
		return err
	}
	if !cred.Has(mdd.CapSysAdmin) {
		return fmt.Errorf("mdt: %s without CAP_SYS_ADMIN: %w", what, syscall.EPERM)
	}
	return nil
}

func (m *MDT) changelogRead(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var q mdsv1.ChangelogReadRequest
	if err := unmarshal(r.Body, &q); err != nil {
		return m.fail(r, err)
	}
	if err := adminCred(q.Cred, "changelog read"); err != nil {
		return m.fail(r, err)
	}
	n := int(q.Max)
	if n <= 0 || n > maxChangelogBatch {
		n = maxChangelogBatch
	}
	recs, err := m.store.ChangelogRead(q.From, n)
	if err != nil {
		return m.fail(r, err)
	}
	rep := &mdsv1.ChangelogReadReply{Last: m.store.ChangelogLast(), Records: make([][]byte, len(recs))}
	for i := range recs {
		rep.Records[i] = recs[i].Marshal()
	}
	return marshal(rep)
}

func (m *MDT) changelogClear(_ context.Context, r *ptlrpc.Request) ([]byte, int32) {
	var q mdsv1.ChangelogClearRequest
	if err := unmarshal(r.Body, &q); err != nil {
		return m.fail(r, err)
	}
	if err := adminCred(q.Cred, "changelog clear"); err != nil {
		return m.fail(r, err)
	}
	end := q.Endrec
	if end == 0 {
		end = m.store.ChangelogLast()
	}
	if err := m.store.ChangelogClear(q.User, end); err != nil {
		return m.fail(r, err)
	}
	return nil, 0
}

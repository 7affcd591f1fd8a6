package client_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/clustertest"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
)

// TestPersistentChecksumTypeBeforeConnect: lctl set_param -P
// osc.*.checksum_type=crc32 is stored on the MGS. A client mounts while
// the OST is registered up but does not answer yet (its OSS restarting):
// the OSC's CONNECT has not completed when the mount applies the
// persistent parameters. Once the OST is back, the OSC must use crc32, as
// a mount that connected at once does.
func TestPersistentChecksumTypeBeforeConnect(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, ChildOSS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cc, err := grpc.NewClient(c.MGS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := adminv1.NewAdminClient(cc).SetParam(ctx, &adminv1.SetParamRequest{Name: "nacre.*.osc.checksum_type", Value: "crc32"}); err != nil {
		t.Fatal(err)
	}
	inUse := func(fs *client.FS) (pref, used ptlrpc.ChecksumType) {
		o, err := fs.OSC(0)
		if err != nil {
			t.Fatal(err)
		}
		return o.Tunables().ChecksumType, o.ChecksumType()
	}
	// A mount that connects at once applies it.
	if pref, used := inUse(c.Mount(0)); pref != ptlrpc.ChecksumCRC32 || used != ptlrpc.ChecksumCRC32 {
		t.Fatalf("mount with the OST up: checksum_type %v, in use %v; want crc32", pref, used)
	}

	// The OSS goes away; the MGS still has the OST up (its lease lasts).
	c.KillOSS()
	cfg := c.ClientConfig(1)
	cfg.Timeout = 2 * time.Second
	fs, err := client.Mount(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(context.Background())
	if err := c.StartOSS(); err != nil {
		t.Fatal(err)
	}
	o, err := fs.OSC(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Import().Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := o.Import().ChecksumTypes(); got != ptlrpc.ChecksumTypes {
		t.Fatalf("the OST agreed to %v", got)
	}
	if pref, used := inUse(fs); pref != ptlrpc.ChecksumCRC32 || used != ptlrpc.ChecksumCRC32 {
		t.Fatalf("mount before the OST answered: checksum_type %v, in use %v; want the persistent crc32", pref, used)
	}
}

package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/internal/clustertest"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// TestGrantHeldAcrossOSSRestart: a client caches dirty data under the
// grant its OST gave it; the OSS restarts, having forgotten every grant,
// while another client has filled the rest of the OST. At its reconnect
// the first client tells the OST what it holds (Lustre's ocd_grant), and
// the OST gives it back (the space was set aside for it, and is still
// free): its CONNECT reply's grant covers its dirty data. The other client
// then fills the OST again, up to ENOSPC, and the first one's dirty data
// still goes to the OST: every byte it wrote reads back. Before, the
// restarted OST gave the client a first grant of an eighth of the free
// space, less than its dirty data, and what the other client wrote next
// could take the room that data needed: acknowledged writes failed with
// ENOSPC at writeback.
func TestGrantHeldAcrossOSSRestart(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, ChildOSS: true, OSTTmpfs: 256 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := c.ClientConfig(0)
	cfg.Data.DirtyExpire = time.Hour // the dirty data stays cached until the Sync
	cfg.Data.MaxDirtyMB = 256
	a, err := client.Mount(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	b := c.Mount(1)
	root := client.Root()

	// a: eight files of 3 MiB each, less than an RPC each, cached.
	const files, each = 8, 3 << 20
	rng := rand.New(rand.NewPCG(5, 6))
	data := make([][]byte, files)
	open := make([]*client.File, files)
	for i := range files {
		data[i] = make([]byte, each)
		for j := range data[i] {
			data[i][j] = byte(rng.Uint32())
		}
		f, _, err := a.Create(ctx, root, a.Root(), fmt.Sprintf("cached.%d", i), syscall.O_CREAT|syscall.O_RDWR, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(context.Background())
		open[i] = f
		if _, _, err := f.WriteAt(ctx, data[i], 0); err != nil {
			t.Fatal(err)
		}
	}
	osc, err := a.OSC(0)
	if err != nil {
		t.Fatal(err)
	}
	dirty := osc.Stats().DirtyBytes
	if dirty < files*each {
		t.Fatalf("a caches %d dirty bytes, want %d: written back already (grant %+v)", dirty, files*each, osc.Stats())
	}

	// b: fills the OST up to what a's grant holds back.
	fill := func(name string) {
		t.Helper()
		f, _, err := b.Create(ctx, root, b.Root(), name, syscall.O_CREAT|syscall.O_WRONLY, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(context.Background())
		chunk := bytes.Repeat([]byte{0xb}, 1<<20)
		for off := int64(0); ; off += int64(len(chunk)) {
			_, _, err := f.WriteAt(ctx, chunk, off)
			if err == nil {
				err = f.Sync(ctx)
			}
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			if err != nil {
				t.Fatalf("%s at %d MiB: %v", name, off>>20, err)
			}
		}
	}
	fill("filler.1")

	instance := osc.Import().Info().Instance
	c.KillOSS()
	if err := c.StartOSS(); err != nil {
		t.Fatal(err)
	}
	for {
		info := osc.Import().Info()
		if info.Instance != instance && info.State == ptlrpc.StateFull {
			var cd ostv1.ConnectData
			if err := ptlrpc.Unmarshal(info.TargetData, &cd); err != nil {
				t.Fatal(err)
			}
			if cd.Grant < uint64(dirty) {
				t.Fatalf("the restarted OST granted %d bytes to a client holding %d dirty", cd.Grant, dirty)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a never reconnected to the restarted OSS: %+v", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fill("filler.2")
	for i, f := range open {
		if err := f.Sync(ctx); err != nil {
			t.Fatalf("a's sync of file %d after the restart: %v", i, err)
		}
	}
	for i := range files {
		at, err := b.Lookup(ctx, root, b.Root(), fmt.Sprintf("cached.%d", i))
		if err != nil {
			t.Fatal(err)
		}
		g, _, err := b.Open(ctx, root, at.FID, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, each+1)
		n, _ := g.ReadAt(ctx, got, 0)
		g.Close(ctx)
		if n != each || !bytes.Equal(got[:n], data[i]) {
			t.Fatalf("file %d reads back %d bytes, not what a wrote", i, n)
		}
	}
}

package osdfile_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
	_ "github.com/nacrefs/nacre/oss/osdfile" // registers "file"
)

func Example() {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "ost")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "OST0000")

	if err := osd.Format(ctx, "file", dir, osd.FormatOptions{Label: "nacre-OST0000"}); err != nil {
		panic(err)
	}
	dev, err := osd.Open(ctx, "file", dir, osd.OpenOptions{})
	if err != nil {
		panic(err)
	}
	defer dev.Close()

	obj := fid.FID{Seq: fid.SeqNormal, Oid: 1}
	tx, err := dev.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Abort()
	tx.SetTransno(1)
	tx.Create(obj, osd.Attr{Mode: 0o100666, Valid: osd.AttrMode})
	tx.WriteAt(obj, [][]byte{[]byte("hello, "), []byte("object")}, 0)
	if err := tx.Commit(ctx); err != nil { // visible now, durable soon
		panic(err)
	}
	if err := dev.Sync(ctx); err != nil { // durable now
		panic(err)
	}

	buf := make([]byte, 64)
	n, err := dev.ReadAt(ctx, obj, [][]byte{buf}, 0)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %q last committed %d\n", dev.Label(), buf[:n], dev.LastCommitted())
	// Output: nacre-OST0000 "hello, object" last committed 1
}

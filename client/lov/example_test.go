package lov_test

import (
	"context"
	"fmt"
	"io"

	"github.com/nacrefs/nacre/client/internal/clienttest"
	"github.com/nacrefs/nacre/client/lov"
	"github.com/nacrefs/nacre/client/osc"
)

// A client writes a file striped over two OSTs; another client reads it
// back, and sees the size, without anyone syncing: the locks move the
// data.
func Example() {
	// An OSS with two OSTs, and an MDS-like helper that precreates objects
	// (the MDS does this in a real file system).
	c, err := clienttest.Start(clienttest.Options{OSTs: 2, Nodes: 2, PortBase: 30700})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.PlainLayout(ctx, 2, 64<<10) // 2 stripes of 64 KiB
	if err != nil {
		panic(err)
	}

	// Each client node: an LNet, a PtlRPC client, a lock client and its
	// callback service, a page cache, and one OSC per OST.
	a, err := c.NewNode(0, osc.DefaultConfig())
	if err != nil {
		panic(err)
	}
	b, err := c.NewNode(1, osc.DefaultConfig())
	if err != nil {
		panic(err)
	}

	fa, err := lov.Open(l, a) // a Node is a lov.Targets
	if err != nil {
		panic(err)
	}
	defer fa.Close()
	msg := []byte("hello, striped world")
	if _, err := fa.WriteAt(ctx, msg, 100<<10); err != nil { // on the second stripe
		panic(err)
	}
	_, at, err := fa.Append(ctx, []byte("!"))
	if err != nil {
		panic(err)
	}

	fb, err := lov.Open(l, b)
	if err != nil {
		panic(err)
	}
	defer fb.Close()
	size, _ := fb.Size(ctx)
	buf := make([]byte, 64)
	n, err := fb.ReadAt(ctx, buf, 100<<10)
	fmt.Printf("appended at %d; size %d\n", at, size)
	fmt.Printf("%q %v\n", buf[:n], err == io.EOF)
	// Output:
	// appended at 102420; size 102421
	// "hello, striped world!" true
}

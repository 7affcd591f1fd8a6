package socklnd_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nacrefs/nacre/lnd/socklnd"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

func ExampleParseOptions() {
	c, err := socklnd.ParseOptions(map[string]string{
		"port":            "20988",
		"min_bulk":        "131072",
		"connect_timeout": "20", // seconds, as Lustre's module parameters
		"backoff_max":     "2s",
	})
	fmt.Println(c.Port, c.MinBulk, c.ConnectTimeout, c.BackoffMax, c.TypedConns, err)

	_, err = socklnd.ParseOptions(map[string]string{"prot": "988"})
	fmt.Println(err != nil)
	// Output:
	// 20988 131072 20s 2s true <nil>
	// true
}

// printHost is the smallest lnet.Host: it takes every payload whole and
// prints what happens.
type printHost struct{}

func (printHost) Parse(hdr *wire.Header, from wire.NID, rx lnet.Rx) error {
	buf := make([]byte, hdr.PayloadLen)
	err := rx.Recv([][]byte{buf}, len(buf))
	fmt.Printf("%v from %v: %q %v\n", hdr.Type, from, buf, err)
	return nil
}

func (printHost) Finalize(msg *lnet.Msg, err error) { fmt.Println("sent:", err) }

func (printHost) PeerEvent(peer wire.NID, ev lnet.PeerEvent) { fmt.Println(peer, ev) }

// LNet brings up a tcp NI through the registered driver; socklnd is
// registered by importing it. (Not run: it listens on a real port.)
func Example() {
	drv, _ := lnet.LookupDriver(wire.TCP)
	ctx := context.Background()
	ni, err := drv.Startup(ctx, lnet.NIConfig{
		NID:         wire.MustParseNID("192.168.1.5@tcp"),
		PID:         wire.PIDLustre,
		Incarnation: 1,
		Options:     map[string]string{"port": "988"},
		Logger:      slog.Default(),
	}, printHost{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ni.Shutdown(ctx)

	payload := []byte("hello")
	ni.Send(&lnet.Msg{
		Hdr: wire.Header{
			Type: wire.MsgPut, SrcNID: wire.MustParseNID("192.168.1.5@tcp"), DstNID: wire.MustParseNID("192.168.1.6@tcp"),
			SrcPID: wire.PIDLustre, DstPID: wire.PIDLustre, PayloadLen: uint32(len(payload)),
			WMD: wire.WireHandleNone, Portal: 4,
		},
		NextHop: wire.MustParseNID("192.168.1.6@tcp"),
		Payload: [][]byte{payload},
	})
}

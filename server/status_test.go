package server

import (
	"context"
	"net"
	"testing"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"

	_ "github.com/nacrefs/nacre/lnd/socklnd"
)

// TestAdvertise: a status port bound to every interface is registered at
// the address of the server's NID, which the MGS can reach; one bound to
// an address, at that address.
func TestAdvertise(t *testing.T) {
	const addr = "127.0.0.6"
	ln, err := lnet.New(context.Background(), lnettest.Config(addr, lnettest.FreePort(t, addr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(context.Background()) })
	s := &Storage{LNet: ln}
	for _, c := range []struct {
		bound *net.TCPAddr
		want  string
	}{
		{&net.TCPAddr{IP: net.IPv4zero, Port: 9882}, "127.0.0.6:9882"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 9882}, "127.0.0.6:9882"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9882}, "127.0.0.1:9882"},
	} {
		if got := s.advertise(c.bound); got != c.want {
			t.Errorf("bound %v: advertised %s, want %s", c.bound, got, c.want)
		}
	}
}

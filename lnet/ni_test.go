package lnet_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/wire"
)

// blockStart makes the fake NI nid's Startup wait until the returned
// function is called, then fail with err; entered is closed once it
// waits.
func blockStart(t *testing.T, nid wire.NID, err error) (entered <-chan struct{}, release func()) {
	t.Helper()
	in, block := make(chan struct{}), make(chan struct{})
	fakeStartupHook = func(n wire.NID) error {
		if n != nid {
			return nil
		}
		close(in)
		<-block
		return err
	}
	t.Cleanup(func() { fakeStartupHook = nil })
	return in, func() { close(block) }
}

// putSent PUTs a byte to target and returns the SEND event's status, or
// fails the test if none comes in 5 s.
func putSent(t *testing.T, ln *lnet.LNet, target wire.ProcessID) <-chan error {
	t.Helper()
	sent := make(chan error, 1)
	h, err := ln.Bind(lnet.MD{Buffers: [][]byte{[]byte("x")}, Threshold: 1, Handler: func(ev lnet.Event) {
		if ev.Type == lnet.EventSend {
			sent <- ev.Status
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Put(context.Background(), h, lnet.NoAckReq, target, 50, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	return sent
}

func waitSent(t *testing.T, sent <-chan error) error {
	t.Helper()
	select {
	case err := <-sent:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no SEND event in 5 s")
		return nil
	}
}

// TestAddNetFailedStartKeepsTraffic: while an added NI's driver starts,
// sends on its net keep to the NIs that work, and its failure to start
// fails none of them.
func TestAddNetFailedStartKeepsTraffic(t *testing.T) {
	a, b := startFake(t, nil), startFake(t, nil)
	added := newFakeNID() // (on the fake net, as a's first NI)
	entered, release := blockStart(t, added, errors.New("bind: cannot assign requested address"))
	done := make(chan error, 1)
	go func() {
		_, err := a.AddNet(context.Background(), lnet.NetConfig{Net: added.Net, Addrs: []netip.Addr{added.Addr}})
		done <- err
	}()
	<-entered
	var sends []<-chan error
	for range 4 {
		sends = append(sends, putSent(t, a, wire.ProcessID{NID: fakeNIDOf(b), PID: b.PID()}))
	}
	release()
	if err := <-done; err == nil {
		t.Fatal("AddNet of an NI whose driver failed to start succeeded")
	}
	for i, s := range sends {
		if err := waitSent(t, s); err != nil {
			t.Errorf("PUT %d failed though a's first NI is up: %v", i, err)
		}
	}
	if slices.Contains(a.NIDs(), added) {
		t.Fatalf("NIDs after the failed add: %v", a.NIDs())
	}
}

// TestAddNetFailedStartWithRoute: a route added through a net whose NI
// then fails to start does not keep the NI; what was sent through it
// ends (with an error), and does not wait for ever.
func TestAddNetFailedStartWithRoute(t *testing.T) {
	a := startFake(t, func(c *lnet.Config) { c.TransactionTimeout = time.Second })
	tcp1, tcp9 := wire.Net{Type: wire.TCP, Num: 1}, wire.Net{Type: wire.TCP, Num: 9}
	added, gw, dst := newFakeNID(), newFakeNID(), newFakeNID()
	added.Net, gw.Net, dst.Net = tcp1, tcp1, tcp9
	entered, release := blockStart(t, added, errors.New("startup failed"))
	done := make(chan error, 1)
	go func() {
		_, err := a.AddNet(context.Background(), lnet.NetConfig{Net: tcp1, Addrs: []netip.Addr{added.Addr}})
		done <- err
	}()
	<-entered
	if err := a.AddRoute(lnet.Route{Net: tcp9, Gateway: gw, Hops: 1}); err != nil {
		t.Fatal(err)
	}
	sent := putSent(t, a, wire.ProcessID{NID: dst, PID: 12345})
	release()
	if err := <-done; err == nil {
		t.Fatal("AddNet succeeded")
	}
	if err := waitSent(t, sent); err == nil {
		t.Fatal("a PUT through an NI that never started was sent")
	}
	if slices.Contains(a.NIDs(), added) || len(a.Config().Networks) != 1 {
		t.Fatalf("after the failed add: NIDs %v, networks %+v", a.NIDs(), a.Config().Networks)
	}
	// Later sends on the route fail at once: no NI on the gateway's net.
	h, err := a.Bind(lnet.MD{Buffers: [][]byte{[]byte("x")}, Threshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Put(context.Background(), h, lnet.NoAckReq, wire.ProcessID{NID: dst, PID: 12345}, 50, 0, 0, 0); !errors.Is(err, lnet.ErrNoRoute) {
		t.Fatalf("PUT through a route whose gateway's net has no NI: %v, want ErrNoRoute", err)
	}
}

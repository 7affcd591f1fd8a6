package lolnd_test

import (
	"context"
	"testing"

	"github.com/nacrefs/nacre/lnd/lolnd"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lndtest"
	"github.com/nacrefs/nacre/lnet/wire"
)

var _ lnet.Driver = (*lolnd.Driver)(nil)

func TestConformance(t *testing.T) {
	lndtest.Run(t, lndtest.Harness{
		Name: "lolnd",
		Pair: func(t *testing.T) (a, b *lnet.LNet, bNID wire.NID) {
			ln, err := lnet.New(context.Background(), lnet.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := ln.Close(context.Background()); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			return ln, ln, wire.LoNID
		},
	})
}

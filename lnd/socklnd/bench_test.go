package socklnd

import (
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// BenchmarkSend1MiB streams 1 MiB PUTs from one NI to another over
// loopback, the receiver's buffers posted in advance, and in the same run
// pumps the same bytes (header and payload, one writev each) through a bare
// TCP socket pair as the baseline. It reports both rates and their ratio.
func BenchmarkSend1MiB(b *testing.B) {
	const size = 1 << 20
	port := testPort(b, "127.0.0.1", "127.0.0.2")
	src := startNode(b, "127.0.0.1", port, nil)
	dst := startNode(b, "127.0.0.2", port, nil)
	credits := src.ni.Tunables().PeerCredits
	ring := make([][]byte, credits+1)
	for i := range ring {
		ring[i] = make([]byte, size)
	}
	var slot atomic.Uint64
	dst.h.setPost(func(hdr *wire.Header) ([][]byte, int) {
		return ring[slot.Add(1)%uint64(len(ring)):][:1], int(hdr.PayloadLen)
	})
	payload := pattern(1, size)
	msgs := make(chan struct{}, 1)
	run := func(n int) time.Duration {
		start := time.Now()
		go func() {
			for range n {
				f, ok := src.h.tryFin(b)
				if !ok {
					break
				}
				if f.err != nil {
					b.Errorf("send: %v", f.err)
				}
			}
			msgs <- struct{}{}
		}()
		go func() {
			for i := range n {
				if !src.h.send(b, src.ni, put(src.nid, dst.nid, uint64(i), payload)) {
					return
				}
			}
		}()
		for range n {
			if r := dst.h.nextRx(b); r.err != nil {
				b.Fatalf("receive: %v", r.err)
			}
		}
		d := time.Since(start)
		<-msgs
		return d
	}
	run(credits) // make the connections

	b.SetBytes(size)
	b.ResetTimer()
	lnd := run(b.N)
	b.StopTimer()
	raw := rawTCP(b, b.N, size)

	mbps := func(d time.Duration) float64 { return float64(b.N) * size / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(lnd), "socklnd-MB/s")
	b.ReportMetric(mbps(raw), "rawtcp-MB/s")
	b.ReportMetric(mbps(lnd)/mbps(raw), "x-vs-rawtcp")
}

// rawTCP moves n messages of a header and size payload bytes from
// 127.0.0.1 to 127.0.0.2 over one TCP connection, with a writev per message
// and reads straight into one buffer, and returns how long it took.
func rawTCP(b *testing.B, n, size int) time.Duration {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(testPort(b, "127.0.0.2"))))
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	out, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	in, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()

	hdr := make([]byte, wire.HeaderSize)
	payload := pattern(2, size)
	start := time.Now()
	go func() {
		vec := make([][]byte, 2)
		for range n {
			vec[0], vec[1] = hdr, payload
			bufs := net.Buffers(vec)
			if _, err := bufs.WriteTo(out); err != nil {
				return
			}
		}
	}()
	rh := make([]byte, wire.HeaderSize)
	rp := make([]byte, size)
	for range n {
		if _, err := io.ReadFull(in, rh); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(in, rp); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

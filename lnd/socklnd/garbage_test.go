package socklnd

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet/wire"
)

// Peers that speak garbage each lose their connection, with a log line
// naming them and the reason, while a good peer's traffic to the same NI
// keeps flowing.
func TestGarbagePeers(t *testing.T) {
	a, b := pair(t, map[string]string{"handshake_timeout": "300ms"})

	// The good peer: a streams to b for the whole test.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	var sent int
	go func() {
		defer wg.Done()
		for ; ; sent++ {
			select {
			case <-stop:
				return
			default:
			}
			size := []int{100, 70_000}[sent%2]
			if !a.h.send(t, a.ni, put(a.nid, b.nid, uint64(sent), pattern(uint64(sent), size))) {
				return
			}
		}
	}()
	var got atomic.Int64
	wg.Add(1)
	go func() { // a's completions: all must succeed
		defer wg.Done()
		for {
			select {
			case f := <-a.h.fins:
				if f.err != nil {
					t.Errorf("good peer's send: %v", f.err)
				}
			case <-stop:
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		next := map[bool]int{} // per size class
		for {
			var r rxRec
			select {
			case r = <-b.h.rxs:
			case <-stop:
				return
			}
			if r.from != a.nid {
				continue // a fake peer's message
			}
			seq := int(r.hdr.MatchBits)
			bulk := seq%2 == 1
			if r.err != nil || seq < next[bulk] || !bytes.Equal(joined(r.dst, r.mlen), pattern(uint64(seq), int(r.hdr.PayloadLen))) {
				t.Errorf("good peer's message %d: err %v, expected at least %d", seq, r.err, next[bulk])
			}
			next[bulk] = seq + 2
			got.Add(1)
		}
	}()

	hello := func(src string) wire.Hello {
		return wire.Hello{Version: wire.HelloVersion, SrcNID: wire.MustParseNID(src + "@tcp"), DstNID: b.nid,
			SrcPID: wire.PIDLustre, DstPID: wire.PIDLustre, SrcIncarnation: 1, ConnType: wire.ConnControl}
	}
	helloBytes := func(src string, edit func(b []byte)) []byte {
		h := hello(src)
		out, err := h.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(out)
		}
		return out
	}
	header := func(from string, payload int) []byte {
		h := put(wire.MustParseNID(from+"@tcp"), b.nid, 1, make([]byte, payload)).Hdr
		buf := make([]byte, wire.HeaderSize)
		if err := h.Marshal(buf); err != nil {
			t.Fatal(err)
		}
		return buf
	}

	for _, tc := range []struct {
		name      string
		src       string // fake peer's NID address
		handshake bool   // do a good hello first
		send      []byte
		log       []string // the log line names these
	}{
		{"random bytes", "127.0.0.10", false, pattern(1, 200),
			[]string{"handshake failed", "bad magic"}},
		{"wrong hello magic", "127.0.0.11", false,
			helloBytes("127.0.0.11", func(b []byte) { b[0] ^= 0xff }),
			[]string{"handshake failed", "bad magic"}},
		{"byte-swapped hello magic", "127.0.0.12", false,
			helloBytes("127.0.0.12", func(b []byte) { binary.BigEndian.PutUint32(b, wire.HelloMagic) }),
			[]string{"handshake failed", "other endianness"}},
		{"wrong hello version", "127.0.0.13", false,
			helloBytes("127.0.0.13", func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 2) }),
			[]string{"handshake failed", "unsupported version"}},
		{"hello for another NID", "127.0.0.14", false,
			helloBytes("127.0.0.14", func(b []byte) { wire.PutNID(b[32:], wire.MustParseNID("127.0.0.99@tcp")) }),
			[]string{"handshake failed", "addressed to 127.0.0.99@tcp"}},
		{"silent", "127.0.0.15", false, nil,
			[]string{"handshake failed", "i/o timeout"}},
		{"payload over MTU", "127.0.0.16", true,
			func() []byte {
				h := header("127.0.0.16", 10)
				binary.LittleEndian.PutUint32(h[68:], wire.MTU+1)
				return h
			}(),
			[]string{"bad header", "peer=127.0.0.16@tcp", "too long"}},
		{"garbage header", "127.0.0.17", true, pattern(17, wire.HeaderSize),
			[]string{"bad header", "peer=127.0.0.17@tcp", "bad magic"}},
		{"byte-swapped header magic", "127.0.0.18", true,
			func() []byte {
				h := header("127.0.0.18", 10)
				binary.BigEndian.PutUint32(h, wire.HeaderMagic)
				return h
			}(),
			[]string{"bad header", "peer=127.0.0.18@tcp", "other endianness"}},
		{"close mid-header", "127.0.0.19", true, header("127.0.0.19", 10)[:50],
			[]string{"connection dropped", "peer=127.0.0.19@tcp", "while reading header"}},
		{"close mid-payload", "127.0.0.20", true, append(header("127.0.0.20", 1000), pattern(20, 500)...),
			[]string{"connection dropped", "peer=127.0.0.20@tcp", "while reading payload"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := dialFake(t, b, tc.src, tc.handshake)
			if len(tc.send) > 0 {
				if _, err := f.nc.Write(tc.send); err != nil {
					t.Fatal(err)
				}
			}
			if strings.HasPrefix(tc.name, "close") {
				f.nc.Close()
			} else {
				f.waitClosed(t)
			}
			line := b.log.waitLine(t, tc.log...)
			if !strings.Contains(line, "level=WARN") {
				t.Errorf("logged below WARN: %s", line)
			}
		})
	}

	// The good peer kept going throughout.
	before := got.Load()
	deadline := time.Now().Add(5 * time.Second)
	for got.Load() < before+20 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if got.Load() < before+20 {
		t.Fatalf("good peer's traffic stalled at %d messages", got.Load())
	}
	st := b.ni.Stats()
	if st.BadHeaders != 3 || st.HandshakeFailures != 6 {
		t.Errorf("b stats %+v", st)
	}
	t.Logf("good peer: %d messages received during the garbage", got.Load())
}

// FuzzIncoming sends arbitrary bytes to an NI, raw or after a good hello,
// then checks that a good peer connecting next is served.
func FuzzIncoming(f *testing.F) {
	good := put(wire.MustParseNID("127.0.0.11@tcp"), wire.MustParseNID("127.0.0.2@tcp"), 7, pattern(7, 300))
	goodBytes := make([]byte, wire.HeaderSize, wire.HeaderSize+300)
	if err := good.Hdr.Marshal(goodBytes); err != nil {
		f.Fatal(err)
	}
	goodBytes = append(goodBytes, good.Payload[0]...)
	over := bytes.Clone(goodBytes[:wire.HeaderSize])
	binary.LittleEndian.PutUint32(over[68:], wire.MTU+1)
	f.Add(false, []byte{})
	f.Add(false, pattern(1, 200))
	f.Add(false, []byte("LNDh\x01\x00\x00\x00"))
	f.Add(true, goodBytes)
	f.Add(true, goodBytes[:200])
	f.Add(true, over)
	f.Add(true, append(bytes.Clone(goodBytes), pattern(2, 50)...))
	// Several messages in one read of the connection's buffer, the last
	// one cut in its header or its payload; a payload that outgrows the
	// buffer.
	f.Add(true, bytes.Repeat(goodBytes, 3))
	f.Add(true, append(bytes.Repeat(goodBytes, 2), goodBytes[:wire.HeaderSize/2]...))
	f.Add(true, append(bytes.Repeat(goodBytes, 2), goodBytes[:wire.HeaderSize+100]...))
	big := put(wire.MustParseNID("127.0.0.10@tcp"), wire.MustParseNID("127.0.0.2@tcp"), 8, pattern(8, 3*rxBufSize))
	bigBytes := make([]byte, wire.HeaderSize, wire.HeaderSize+3*rxBufSize)
	if err := big.Hdr.Marshal(bigBytes); err != nil {
		f.Fatal(err)
	}
	bigBytes = append(bigBytes, big.Payload[0]...)
	f.Add(true, append(bytes.Clone(goodBytes), bigBytes...))
	f.Add(true, append(bytes.Clone(bigBytes), over...))
	f.Fuzz(func(t *testing.T, handshake bool, data []byte) {
		b := startNodeAnyPort(t, "127.0.0.2", map[string]string{"handshake_timeout": "200ms"})
		bad := dialFake(t, b, "127.0.0.10", handshake)
		bad.nc.Write(data)
		bad.nc.Close()

		g := dialFake(t, b, "127.0.0.11", true)
		if _, err := g.nc.Write(goodBytes); err != nil {
			t.Fatal(err)
		}
		for {
			r := b.h.nextRx(t)
			if r.from != g.nid {
				continue // whatever the fuzzed peer managed to send
			}
			if r.err != nil || r.hdr != good.Hdr || !bytes.Equal(joined(r.dst, r.mlen), good.Payload[0]) {
				t.Fatalf("good peer's message: %+v, %v", r.hdr, r.err)
			}
			return
		}
	})
}

// A peer that stops sending in the middle of a message loses its
// connection after sock_timeout, whether it stopped in the payload or in
// the header: a reader waiting forever for the rest of a header would keep
// the connection (and its goroutine) for as long as the peer's kernel
// answers keepalives.
func TestStallMidMessage(t *testing.T) {
	_, b := pair(t, map[string]string{"sock_timeout": "300ms"})
	header := func(from string, payload int) []byte {
		h := put(wire.MustParseNID(from+"@tcp"), b.nid, 1, make([]byte, payload)).Hdr
		buf := make([]byte, wire.HeaderSize)
		if err := h.Marshal(buf); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	for _, tc := range []struct {
		name string
		src  string
		send []byte
		why  string
	}{
		{"payload", "127.0.0.21", append(header("127.0.0.21", 1000), pattern(21, 500)...), "while reading payload"},
		{"header", "127.0.0.22", header("127.0.0.22", 10)[:50], "while reading header"},
		{"header after a message", "127.0.0.23",
			append(append(header("127.0.0.23", 10), pattern(23, 10)...), header("127.0.0.23", 10)[:30]...),
			"while reading header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := dialFake(t, b, tc.src, true)
			if _, err := f.nc.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			f.waitClosed(t)
			b.log.waitLine(t, "connection dropped", "peer="+tc.src+"@tcp", tc.why, "no progress")
		})
	}
}

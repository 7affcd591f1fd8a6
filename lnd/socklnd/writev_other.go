//go:build !linux

package socklnd

import "net"

// inlineWrites is false where nbWriter is not implemented: every message
// goes through its connection's writer goroutine.
const inlineWrites = false

type nbWriter struct{}

func (*nbWriter) init(*net.TCPConn) {}

func (*nbWriter) write([][]byte) (int, error) { return 0, nil }

// combineWrites is false with inlineWrites.
const combineWrites = false

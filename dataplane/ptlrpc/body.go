package ptlrpc

import "google.golang.org/protobuf/proto"

// vtMessage is what protoc-gen-go-vtproto generates for every message in
// proto/: marshal and unmarshal code written out field by field, without
// the reflection proto.Marshal goes through. On a one-RPC operation that is
// most of what a lock or metadata request costs in CPU besides the network.
type vtMessage interface {
	MarshalVT() ([]byte, error)
	UnmarshalVT([]byte) error
}

// Marshal encodes a request or reply body.
func Marshal(m proto.Message) ([]byte, error) {
	if v, ok := m.(vtMessage); ok {
		return v.MarshalVT()
	}
	return proto.Marshal(m)
}

// Unmarshal decodes a request or reply body into m, replacing what m held
// (as proto.Unmarshal does: the generated UnmarshalVT merges). Strings are
// taken as the bytes that came, unchecked for UTF-8: names are bytes fields
// in proto/, and CONNECT, whose UUIDs are strings, is decoded with
// proto.Unmarshal.
func Unmarshal(b []byte, m proto.Message) error {
	if v, ok := m.(vtMessage); ok {
		proto.Reset(m)
		return v.UnmarshalVT(b)
	}
	return proto.Unmarshal(b, m)
}

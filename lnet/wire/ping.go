package wire

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// PingMagic starts every ping payload; its bytes on the wire spell "Ping". A
// big-endian peer would send 0x50696e67, which Unmarshal reports as
// ErrOtherEndian.
const PingMagic uint32 = 0x676e6950

// MaxPingNIDs bounds the NIDs one ping payload may list.
const MaxPingNIDs = 256

// PingInfoFixedSize is the size of a ping payload without its NID list; each
// NID adds PingNIDSize bytes. The layout, all integers little-endian:
//
//	offset size field
//	     0    4 magic, PingMagic
//	     4    4 features (PingFeat* bits)
//	     8    4 pid
//	    12    4 number of NIDs, at most MaxPingNIDs
//	    16 28*n NIDs, each a NID (NIDSize bytes) then its status (4 bytes)
const PingInfoFixedSize = 16

// PingNIDSize is the size of one NIDStatus in a ping payload.
const PingNIDSize = NIDSize + 4

// MaxPingInfoSize is the largest ping payload: the MD a pinger posts for the
// REPLY needs no more.
const MaxPingInfoSize = PingInfoFixedSize + MaxPingNIDs*PingNIDSize

// Feature bits a node advertises in PingInfo.Features, after Lustre's
// LNET_PING_FEAT_*. Bits this package does not name are carried through
// unchanged, so newer peers can add features.
const (
	PingFeatBase            uint32 = 1 << 0 // the node answers pings
	PingFeatNIStatus        uint32 = 1 << 1 // the statuses in the NID list are meaningful
	PingFeatRoutingDisabled uint32 = 1 << 2 // the node does not forward between its nets
	PingFeatMultiRail       uint32 = 1 << 3 // the node does multi-rail: use all its NIDs
	PingFeatDiscovery       uint32 = 1 << 4 // the node takes part in dynamic peer discovery
)

// NIStatus is the health of one network interface as a ping reports it. The
// values are Lustre's LNET_NI_STATUS_UP and _DOWN, chosen to be unlikely as
// garbage.
type NIStatus uint32

// The interface statuses.
const (
	NIStatusUp   NIStatus = 0x15aac0de
	NIStatusDown NIStatus = 0xdeadface
)

// String returns "up", "down", or "NIStatus(0x...)" for an unknown value.
func (s NIStatus) String() string {
	switch s {
	case NIStatusUp:
		return "up"
	case NIStatusDown:
		return "down"
	}
	return "NIStatus(0x" + strconv.FormatUint(uint64(s), 16) + ")"
}

// Known reports whether s is NIStatusUp or NIStatusDown.
func (s NIStatus) Known() bool { return s == NIStatusUp || s == NIStatusDown }

// NIDStatus is one of a node's NIDs and the status of the interface behind it.
type NIDStatus struct {
	NID    NID
	Status NIStatus
}

// PingInfo is the payload of the REPLY to an LNet ping (a GET on the ping
// portal): the answering node's pid, features and every NID it has, with
// status. Multi-rail discovery learns a peer's NIDs from it.
type PingInfo struct {
	// Features are PingFeat* bits; unknown bits are kept.
	Features uint32
	// PID is the answering process's pid.
	PID uint32
	// NIDs are the node's NIDs, at most MaxPingNIDs, each valid and non-zero
	// with a known status. Order is kept; by Lustre convention 0@lo comes
	// first.
	NIDs []NIDStatus
}

// Size returns the number of bytes p encodes to.
func (p *PingInfo) Size() int { return PingInfoFixedSize + PingNIDSize*len(p.NIDs) }

// AppendBinary appends the encoding of p to b and returns the extended slice
// (encoding.BinaryAppender). It checks p by the rules Unmarshal applies and
// returns b unchanged with an error wrapping ErrTooLong, ErrBadNID or
// ErrBadField if p breaks one.
func (p *PingInfo) AppendBinary(b []byte) ([]byte, error) {
	if len(p.NIDs) > MaxPingNIDs {
		return b, fmt.Errorf("%w: ping lists %d NIDs, at most %d", ErrTooLong, len(p.NIDs), MaxPingNIDs)
	}
	for i, ns := range p.NIDs {
		if err := checkNIDStatus(i, ns); err != nil {
			return b, err
		}
	}
	n := len(b)
	b = append(b, make([]byte, p.Size())...)
	e := b[n:]
	le := binary.LittleEndian
	le.PutUint32(e[0:], PingMagic)
	le.PutUint32(e[4:], p.Features)
	le.PutUint32(e[8:], p.PID)
	le.PutUint32(e[12:], uint32(len(p.NIDs)))
	for i, ns := range p.NIDs {
		off := PingInfoFixedSize + PingNIDSize*i
		PutNID(e[off:], ns.NID)
		le.PutUint32(e[off+NIDSize:], uint32(ns.Status))
	}
	return b, nil
}

func checkNIDStatus(i int, ns NIDStatus) error {
	if reason := ns.NID.problem(); reason != "" {
		return fmt.Errorf("%w: ping NID %d %v: %s", ErrBadNID, i, ns.NID, reason)
	}
	if !ns.Status.Known() {
		return fmt.Errorf("%w: ping NID %d (%v) has status %v", ErrBadField, i, ns.NID, ns.Status)
	}
	return nil
}

// Unmarshal decodes a ping payload that fills b exactly (pass the REPLY's
// received bytes, not the whole MD). On error p is left unchanged and the
// error wraps one of:
//
//   - ErrShort: b ends before the fixed part or the NIDs it announces.
//   - ErrBadMagic, and also ErrOtherEndian for a byte-swapped PingMagic.
//   - ErrTooLong: more than MaxPingNIDs NIDs, or bytes after the last one.
//   - ErrBadNID: a NID that does not decode, or a zero NID.
//   - ErrBadField: a status other than up or down.
func (p *PingInfo) Unmarshal(b []byte) error {
	if len(b) < PingInfoFixedSize {
		return fmt.Errorf("%w: ping needs at least %d bytes, have %d", ErrShort, PingInfoFixedSize, len(b))
	}
	le := binary.LittleEndian
	if err := checkMagic("ping", le.Uint32(b[0:]), PingMagic); err != nil {
		return err
	}
	count := le.Uint32(b[12:])
	if count > MaxPingNIDs {
		return fmt.Errorf("%w: ping lists %d NIDs, at most %d", ErrTooLong, count, MaxPingNIDs)
	}
	want := PingInfoFixedSize + PingNIDSize*int(count)
	switch {
	case len(b) < want:
		return fmt.Errorf("%w: ping with %d NIDs needs %d bytes, have %d", ErrShort, count, want, len(b))
	case len(b) > want:
		return fmt.Errorf("%w: ping with %d NIDs is %d bytes, have %d", ErrTooLong, count, want, len(b))
	}
	d := PingInfo{
		Features: le.Uint32(b[4:]),
		PID:      le.Uint32(b[8:]),
	}
	if count > 0 {
		d.NIDs = make([]NIDStatus, count)
	}
	for i := range d.NIDs {
		off := PingInfoFixedSize + PingNIDSize*i
		nid, reason := getNID(b[off:])
		if reason != "" {
			return fmt.Errorf("%w: ping NID %d: %s", ErrBadNID, i, reason)
		}
		ns := NIDStatus{NID: nid, Status: NIStatus(le.Uint32(b[off+NIDSize:]))}
		if err := checkNIDStatus(i, ns); err != nil {
			return err
		}
		d.NIDs[i] = ns
	}
	*p = d
	return nil
}

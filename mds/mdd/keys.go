package mdd

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/nacrefs/nacre/internal/fid"
)

// Key prefixes: one byte naming the record type. The full layout is in
// doc.go.
const (
	pfxInode   = 'i' // i FID → inode record
	pfxDirent  = 'd' // d parentFID hash name → dirent record
	pfxLink    = 'k' // k childFID parentFID name → (empty): the link EA
	pfxLayout  = 'l' // l FID → layout.Marshal
	pfxXattr   = 'x' // x FID name → value
	pfxLSOM    = 's' // s FID → LSOM record
	pfxHSM     = 'h' // h FID → HSM record
	pfxOrphan  = 'o' // o FID → (empty)
	pfxCLRec   = 'c' // c index → changelog record
	pfxCLUser  = 'u' // u id → changelog user record
	pfxDestroy = 'y' // y id → destroy record
	pfxFLD     = 'f' // f start → FLD record
	pfxMeta    = 'm' // m name → counters and state
	pfxLastObj = 'v' // v ostIndex → last object used there (objects.go)
	pfxClient  = 'r' // r client UUID → (empty): a client connected (clients.go)
	pfxReply   = 'p' // p len(UUID) UUID XID → transno, reply body (replies.go)
)

// Meta keys.
var (
	keyFormat    = []byte("mformat")    // u32 format version
	keyTransno   = []byte("mtransno")   // u64 highest transno applied
	keyInodes    = []byte("minodes")    // u64 inode count
	keyCLNext    = []byte("mclnext")    // u64 next changelog index
	keyCLUser    = []byte("mcluser")    // u32 next changelog user id
	keyDestroy   = []byte("mdestroy")   // u64 next destroy record id
	keySeqCtl    = []byte("mseqctl")    // u64 controller: next free sequence
	keySeqServer = []byte("mseqserver") // seq server: super range and next sequence
	// keyClientsKnown (empty) says the client records (pfxClient) list
	// every client the MDT has: set by format and when a recovery ends
	// (ClientsComplete), absent in a store of a binary that kept none.
	keyClientsKnown = []byte("mclients")
)

const fidLen = fid.Size

// putFID writes f big-endian so that keys sort by (seq, oid, ver).
func putFID(b []byte, f fid.FID) {
	binary.BigEndian.PutUint64(b, f.Seq)
	binary.BigEndian.PutUint32(b[8:], f.Oid)
	binary.BigEndian.PutUint32(b[12:], f.Ver)
}

func getFID(b []byte) fid.FID {
	return fid.FID{Seq: binary.BigEndian.Uint64(b), Oid: binary.BigEndian.Uint32(b[8:]), Ver: binary.BigEndian.Uint32(b[12:])}
}

func fidKey(pfx byte, f fid.FID) []byte {
	k := make([]byte, 1+fidLen)
	k[0] = pfx
	putFID(k[1:], f)
	return k
}

// fidKeyBuf holds a FID key built on the caller's stack, for a lookup
// that must not allocate.
type fidKeyBuf [1 + fidLen]byte

// key builds fidKey(pfx, f) in b.
func (b *fidKeyBuf) key(pfx byte, f fid.FID) []byte {
	b[0] = pfx
	putFID(b[1:], f)
	return b[:]
}

// fidPrefix returns [pfx FID, pfx FID+1): the bounds of every key that
// starts with pfx and f.
func fidPrefix(pfx byte, f fid.FID) (lo, hi []byte) {
	lo = fidKey(pfx, f)
	return lo, prefixEnd(lo)
}

// prefixEnd returns the smallest key greater than every key starting with p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

// Readdir cookies. 0 and 1 stand before the first entry for "." and "..";
// entry hashes live in [firstHash, DirEnd); DirEnd is the cookie after the
// last entry (Lustre's MDS_DIR_END_OFF).
const (
	cookieDot    = 0
	cookieDotDot = 1
	firstHash    = 2
	// DirEnd is the cookie Readdir returns when the directory is done.
	DirEnd uint64 = 0xfffffffffffffffe
)

// NameHash is the 63-bit FNV-1a hash of a name that orders directory
// entries and serves as their readdir cookie. It is positive as a signed
// 64-bit value (telldir returns an off_t) and never 0, 1 or DirEnd.
func NameHash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	v := h.Sum64() >> 1
	if v < firstHash {
		v = firstHash
	}
	return v
}

func direntKey(parent fid.FID, name string) []byte {
	return appendDirentKey(make([]byte, 0, 1+fidLen+8+len(name)), parent, name)
}

// direntKeyMax is the length of the longest entry's key.
const direntKeyMax = 1 + fidLen + 8 + MaxName

// appendDirentKey appends direntKey(parent, name) to b.
func appendDirentKey(b []byte, parent fid.FID, name string) []byte {
	b = append(b, pfxDirent)
	b = append(b, make([]byte, fidLen)...)
	putFID(b[len(b)-fidLen:], parent)
	b = binary.BigEndian.AppendUint64(b, NameHash(name))
	return append(b, name...)
}

// direntHashKey is the first key of parent's entries with hash ≥ h.
func direntHashKey(parent fid.FID, h uint64) []byte {
	k := make([]byte, 1+fidLen+8)
	k[0] = pfxDirent
	putFID(k[1:], parent)
	binary.BigEndian.PutUint64(k[1+fidLen:], h)
	return k
}

// parseDirentKey splits a dirent key; ok is false for a malformed key.
func parseDirentKey(k []byte) (parent fid.FID, hash uint64, name string, ok bool) {
	if len(k) < 1+fidLen+8+1 || k[0] != pfxDirent {
		return fid.FID{}, 0, "", false
	}
	return getFID(k[1:]), binary.BigEndian.Uint64(k[1+fidLen:]), string(k[1+fidLen+8:]), true
}

func linkKey(child, parent fid.FID, name string) []byte {
	k := make([]byte, 1+2*fidLen+len(name))
	k[0] = pfxLink
	putFID(k[1:], child)
	putFID(k[1+fidLen:], parent)
	copy(k[1+2*fidLen:], name)
	return k
}

func parseLinkKey(k []byte) (child, parent fid.FID, name string, ok bool) {
	if len(k) < 1+2*fidLen+1 || k[0] != pfxLink {
		return fid.FID{}, fid.FID{}, "", false
	}
	return getFID(k[1:]), getFID(k[1+fidLen:]), string(k[1+2*fidLen:]), true
}

func xattrKey(f fid.FID, name string) []byte {
	k := make([]byte, 1+fidLen+len(name))
	k[0] = pfxXattr
	putFID(k[1:], f)
	copy(k[1+fidLen:], name)
	return k
}

func u64Key(pfx byte, v uint64) []byte {
	k := make([]byte, 9)
	k[0] = pfx
	binary.BigEndian.PutUint64(k[1:], v)
	return k
}

func u64Val(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

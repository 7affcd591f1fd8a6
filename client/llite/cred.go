package llite

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
)

// nobody is who a request without a caller runs as.
const nobody = 65534

// cred returns the credentials of ctx's caller: uid and gid from the FUSE
// header (the fsuid and fsgid), supplementary groups and effective
// capabilities from /proc/PID/status. When the process is gone (or in
// another PID namespace) uid 0 has every capability and others none.
func (m *mount) cred(ctx context.Context) client.Cred {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return client.Cred{UID: nobody, GID: nobody}
	}
	cr := client.Cred{UID: c.Uid, GID: c.Gid}
	groups, caps, ok := m.creds.get(c.Pid, c.Uid, c.Gid)
	switch {
	case ok:
		cr.Groups, cr.Cap = groups, caps&mdc.CapRoot
	case c.Uid == 0:
		cr.Cap = mdc.CapRoot
	}
	return cr
}

// creds caches what /proc says of a process, briefly: a process's groups
// rarely change, and reading /proc for each request would cost more than
// the request.
type creds struct {
	mu sync.Mutex
	m  map[credKey]credEntry
}

type credKey struct{ pid, uid, gid uint32 }

type credEntry struct {
	groups []uint32
	caps   uint64
	at     time.Time
}

const (
	credTTL  = time.Second
	credsMax = 1024
)

func (c *creds) init() { c.m = make(map[credKey]credEntry) }

func (c *creds) get(pid, uid, gid uint32) ([]uint32, uint64, bool) {
	if pid == 0 {
		return nil, 0, false
	}
	k := credKey{pid, uid, gid}
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < credTTL {
		return e.groups, e.caps, true
	}
	groups, caps, ok := readStatus(pid, uid, gid)
	if !ok {
		return nil, 0, false
	}
	c.mu.Lock()
	if len(c.m) >= credsMax {
		clear(c.m)
	}
	c.m[k] = credEntry{groups: groups, caps: caps, at: now}
	c.mu.Unlock()
	return groups, caps, true
}

// readStatus reads the Groups and CapEff lines of /proc/PID/status, if
// the process there still has the fsuid and fsgid the request carried
// (the PID may have been reused).
func readStatus(pid, uid, gid uint32) (groups []uint32, caps uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil, 0, false
	}
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		k, v, found := bytes.Cut(sc.Bytes(), []byte(":"))
		if !found {
			continue
		}
		f := bytes.Fields(v)
		switch string(k) {
		case "Uid", "Gid":
			// real, effective, saved, fs
			want := uid
			if string(k) == "Gid" {
				want = gid
			}
			if len(f) < 4 {
				return nil, 0, false
			}
			if n, err := strconv.ParseUint(string(f[3]), 10, 32); err != nil || uint32(n) != want {
				return nil, 0, false
			}
			seen++
		case "Groups":
			for _, g := range f {
				n, err := strconv.ParseUint(string(g), 10, 32)
				if err != nil {
					return nil, 0, false
				}
				groups = append(groups, uint32(n))
			}
			seen++
		case "CapEff":
			if len(f) != 1 {
				return nil, 0, false
			}
			n, err := strconv.ParseUint(string(f[0]), 16, 64)
			if err != nil {
				return nil, 0, false
			}
			caps = n
			seen++
		}
	}
	return groups, caps, seen == 4
}

package llite

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nacrefs/nacre/internal/jobstats"
)

// Job ids (Lustre's jobid_var): every request a process makes through the
// mount carries the job id the mount's JobIDVar derives from it, so the
// servers' job_stats attribute operations and bytes to jobs.

// jobs caches job ids by process, briefly (reading /proc per request
// would cost more than the request).
type jobs struct {
	mu sync.Mutex
	m  map[uint32]jobEntry
}

type jobEntry struct {
	id string
	at time.Time
}

const (
	jobTTL  = time.Second
	jobsMax = 1024
)

// withJob returns ctx carrying the job id of the caller of req, if any.
func (m *mount) withJob(req, ctx context.Context) context.Context {
	c, ok := fuse.FromContext(req)
	if !ok || c.Pid == 0 {
		return ctx
	}
	mode := m.fs.JobIDVar()
	if mode == "" || mode == "disable" {
		return ctx
	}
	now := time.Now()
	m.jobs.mu.Lock()
	e, ok := m.jobs.m[c.Pid]
	m.jobs.mu.Unlock()
	if !ok || now.Sub(e.at) >= jobTTL {
		e = jobEntry{id: jobIDOf(c.Pid, c.Uid, mode), at: now}
		m.jobs.mu.Lock()
		if m.jobs.m == nil || len(m.jobs.m) >= jobsMax {
			m.jobs.m = make(map[uint32]jobEntry)
		}
		m.jobs.m[c.Pid] = e
		m.jobs.mu.Unlock()
	}
	if e.id == "" {
		return ctx
	}
	return jobstats.WithJob(ctx, e.id)
}

// jobIDOf derives a process's job id: procname_uid ("dd.1000"), or the
// value of the environment variable mode names ("" without one).
func jobIDOf(pid, uid uint32, mode string) string {
	proc := "/proc/" + strconv.FormatUint(uint64(pid), 10)
	if mode == "procname_uid" {
		b, err := os.ReadFile(proc + "/comm")
		if err != nil {
			return ""
		}
		return string(bytes.TrimSpace(b)) + "." + strconv.FormatUint(uint64(uid), 10)
	}
	b, err := os.ReadFile(proc + "/environ")
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte("=")); ok && string(k) == mode {
			return string(v)
		}
	}
	return ""
}

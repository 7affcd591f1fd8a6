// Package jobstats keeps per-job statistics the way Lustre's job_stats
// does: for each job id a server sees on requests (the client's jobid_var:
// procname_uid by default, or an environment variable), counters of
// samples, min, max and sum per operation, printed in Lustre's YAML shape.
// The number of jobs is capped; at the cap the job seen least recently
// goes.
package jobstats

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultMaxJobs caps the jobs kept.
const DefaultMaxJobs = 1024

// Stats are the job statistics of one target. Safe for concurrent use.
type Stats struct {
	mu   sync.Mutex
	max  int
	jobs map[string]*job
	now  func() time.Time
}

type job struct {
	id       string
	start    time.Time
	snapshot time.Time
	ops      map[string]*Counter
}

// Counter is one operation's figures.
type Counter struct {
	Unit                   string
	Samples, Min, Max, Sum uint64
}

// New returns empty statistics keeping at most max jobs (0: the default).
func New(max int) *Stats {
	if max <= 0 {
		max = DefaultMaxJobs
	}
	return &Stats{max: max, jobs: make(map[string]*job), now: time.Now}
}

// Add records one sample v (in unit) of op for jobID; an empty job id is
// not recorded.
func (s *Stats) Add(jobID, op, unit string, v uint64) {
	if jobID == "" || s == nil {
		return
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil {
		if len(s.jobs) >= s.max {
			s.evictLocked()
		}
		j = &job{id: jobID, start: now, ops: make(map[string]*Counter)}
		s.jobs[jobID] = j
	}
	j.snapshot = now
	c := j.ops[op]
	if c == nil {
		c = &Counter{Unit: unit, Min: v, Max: v}
		j.ops[op] = c
	}
	c.Samples++
	c.Sum += v
	c.Min = min(c.Min, v)
	c.Max = max(c.Max, v)
}

func (s *Stats) evictLocked() {
	var old *job
	for _, j := range s.jobs {
		if old == nil || j.snapshot.Before(old.snapshot) {
			old = j
		}
	}
	if old != nil {
		delete(s.jobs, old.id)
	}
}

// Job is one job's figures: its id, when it was last seen, and its
// counters by operation.
type Job struct {
	ID       string
	Snapshot time.Time
	Ops      map[string]Counter
}

// Jobs returns a copy of every job's figures, in no order.
func (s *Stats) Jobs() []Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Job, 0, len(s.jobs))
	for _, j := range s.jobs {
		ops := make(map[string]Counter, len(j.ops))
		for k, c := range j.ops {
			ops[k] = *c
		}
		out = append(out, Job{ID: j.id, Snapshot: j.snapshot, Ops: ops})
	}
	return out
}

// Get returns a copy of jobID's counters by operation (nil if unknown).
func (s *Stats) Get(jobID string) map[string]Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[jobID]
	if j == nil {
		return nil
	}
	out := make(map[string]Counter, len(j.ops))
	for k, c := range j.ops {
		out[k] = *c
	}
	return out
}

// Clear forgets every job (lctl set_param *.job_stats=clear).
func (s *Stats) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.jobs)
}

// YAML prints the jobs as Lustre's job_stats file does, jobs by id and
// the operations in ops' order (others after, by name).
func (s *Stats) YAML(ops ...string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	b.WriteString("job_stats:\n")
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		j := s.jobs[id]
		fmt.Fprintf(&b, "- job_id:          %s\n", id)
		fmt.Fprintf(&b, "  snapshot_time:   %d\n", j.snapshot.Unix())
		fmt.Fprintf(&b, "  start_time:      %d\n", j.start.Unix())
		names := slices.Clone(ops)
		var rest []string
		for k := range j.ops {
			if !slices.Contains(ops, k) {
				rest = append(rest, k)
			}
		}
		slices.Sort(rest)
		for _, op := range append(names, rest...) {
			c := j.ops[op]
			if c == nil {
				c = &Counter{Unit: "usecs"}
				if strings.HasSuffix(op, "_bytes") {
					c.Unit = "bytes"
				}
			}
			fmt.Fprintf(&b, "  %-16s { samples: %d, unit: %s, min: %d, max: %d, sum: %d }\n", op+":", c.Samples, c.Unit, c.Min, c.Max, c.Sum)
		}
	}
	return b.String()
}

type jobKey struct{}

// WithJob returns ctx carrying the job id of the caller (what a client's
// requests are tagged with); an id is cut to 31 printable bytes (Lustre's
// LUSTRE_JOBID_SIZE with its NUL).
func WithJob(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, jobKey{}, Clean(id))
}

// JobOf returns the job id ctx carries, or "".
func JobOf(ctx context.Context) string {
	id, _ := ctx.Value(jobKey{}).(string)
	return id
}

// Clean makes id fit a request header: printable ASCII, at most 31 bytes.
func Clean(id string) string {
	b := make([]byte, 0, min(len(id), 31))
	for i := 0; i < len(id) && len(b) < 31; i++ {
		if c := id[i]; c > ' ' && c < 0x7f {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	return string(b)
}

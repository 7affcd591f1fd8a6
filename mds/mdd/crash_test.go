package mdd

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
)

// The crash test: a child process (this test binary, re-executed with
// crashEnv set) runs a random namespace storm and logs every operation
// before ("I") and after ("D", with its errno) it runs, every Sync ("S",
// covering every operation done before it), and every client sequence
// granted ("Q"). The parent kills it with SIGKILL after a delay, reopens
// the store, runs Check, and verifies that the namespace equals the model
// after some prefix of the operations that includes everything the last
// Sync covered, that LastCommitted covers it, and that no granted sequence
// is granted again.
const crashEnv = "NACRE_MDD_CRASH_DIR"

func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: re-executes the test binary")
	}
	for i, delay := range []time.Duration{0, 200 * time.Millisecond, 600 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashEnv+"="+dir, "NACRE_MDD_CRASH_SEED="+strconv.Itoa(i+1))
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Count the delay from the child's first Sync, not from its
			// start: a loaded machine may take seconds to start it.
			logPath := path.Join(dir, "ops.log")
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "\nS ") {
					break
				}
			}
			time.Sleep(delay)
			cmd.Process.Kill()
			cmd.Wait()
			verifyCrash(t, dir)
		})
	}
}

type crashOp struct {
	n     int
	args  []string
	done  bool
	errno int
}

func verifyCrash(t *testing.T, dir string) {
	logData, err := os.ReadFile(path.Join(dir, "ops.log"))
	if err != nil {
		t.Fatalf("the child wrote no log: %v", err)
	}
	var ops []*crashOp
	synced, syncedTransno := -1, uint64(0)
	lastOK := -1 // the last op that succeeded: failed ops take no transno
	granted := map[uint64]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(logData)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue // a torn last line
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "I":
			ops = append(ops, &crashOp{n: n, args: f[2:]})
		case "D":
			if len(f) == 3 && len(ops) > 0 && ops[len(ops)-1].n == n {
				ops[len(ops)-1].done = true
				ops[len(ops)-1].errno, _ = strconv.Atoi(f[2])
				if ops[len(ops)-1].errno == 0 {
					lastOK = n
				}
			}
		case "S":
			synced, syncedTransno = n, uint64(lastOK+1)
		case "Q":
			q, _ := strconv.ParseUint(f[1], 0, 64)
			granted[q] = true
		}
	}
	if synced < 0 {
		t.Fatalf("the child never synced (%d ops logged): a longer delay is needed", len(ops))
	}
	s, err := Open(testConfig(path.Join(dir, "db")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("Check after the crash: %v", err)
	}
	if s.LastCommitted() < syncedTransno {
		t.Fatalf("LastCommitted %d, the child synced transno %d", s.LastCommitted(), syncedTransno)
	}
	got := walk(t, s)
	model := map[string]byte{"/": 'd'}
	matched := -2
	// Ops up to synced must all be there; later ones may be.
	for i, op := range ops {
		if op.n > synced && same(model, got) {
			matched = i - 1
			break
		}
		if op.done && op.errno == 0 {
			apply(model, op.args)
		} else if !op.done {
			// The last op: killed while running; try it applied.
			if same(model, got) {
				matched = i - 1
				break
			}
			apply(model, op.args)
		}
	}
	if matched == -2 && same(model, got) {
		matched = len(ops) - 1
	}
	if matched == -2 {
		t.Fatalf("the store after the crash matches no prefix of %d ops that includes the %d synced ones:\n%s", len(ops), synced+1, diff(model, got))
	}
	for q := range granted {
		if e, err := s.FLDLookup(q); err != nil || e.Index != 0 {
			t.Fatalf("granted sequence %#x not in the FLD: %+v, %v", q, e, err)
		}
	}
	for range 3 {
		q, err := s.AllocClientSeq()
		if err != nil || granted[q] {
			t.Fatalf("sequence %#x granted again after the crash (%v)", q, err)
		}
	}
	last := -1
	if matched >= 0 {
		last = ops[matched].n
	}
	t.Logf("ops 0..%d logged, 0..%d synced; the store holds ops 0..%d", ops[len(ops)-1].n, synced, last)
}

func same(model, got map[string]byte) bool {
	if len(model) != len(got) {
		return false
	}
	for k, v := range model {
		if got[k] != v {
			return false
		}
	}
	return true
}

func diff(model, got map[string]byte) string {
	var b strings.Builder
	for k, v := range model {
		if got[k] != v {
			fmt.Fprintf(&b, "model has %s %c, store %c\n", k, v, got[k])
		}
	}
	for k, v := range got {
		if model[k] == 0 {
			fmt.Fprintf(&b, "store has %s %c\n", k, v)
		}
	}
	return b.String()
}

// walk lists every path of the namespace with its kind ('d', 'f', 'l').
func walk(t *testing.T, s *Store) map[string]byte {
	out := map[string]byte{"/": 'd'}
	var rec func(dir fid.FID, p string)
	rec = func(dir fid.FID, p string) {
		for _, e := range readAll(t, s, dir, 256) {
			if e.Name == "." || e.Name == ".." {
				continue
			}
			child := path.Join(p, e.Name)
			switch e.Type {
			case DTDir:
				out[child] = 'd'
				rec(e.FID, child)
			case DTLnk:
				out[child] = 'l'
			default:
				out[child] = 'f'
			}
		}
	}
	rec(RootFID, "/")
	return out
}

// apply replays a successful op on the path model.
func apply(m map[string]byte, a []string) {
	switch a[0] {
	case "create":
		m[path.Join(a[1], a[2])] = 'f'
	case "symlink":
		m[path.Join(a[1], a[2])] = 'l'
	case "mkdir":
		m[path.Join(a[1], a[2])] = 'd'
	case "unlink", "rmdir":
		delete(m, path.Join(a[1], a[2]))
	case "link":
		m[path.Join(a[2], a[3])] = 'f'
	case "rename":
		from, to := path.Join(a[1], a[2]), path.Join(a[3], a[4])
		if m[to] == 'd' {
			delete(m, to)
		}
		moved := map[string]byte{}
		for k, v := range m {
			if k == from || strings.HasPrefix(k, from+"/") {
				moved[to+k[len(from):]] = v
				delete(m, k)
			}
		}
		for k, v := range moved {
			m[k] = v
		}
	}
}

// TestCrashChild is the storm the parent kills; it does nothing unless run
// by TestCrash.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	seed, _ := strconv.Atoi(os.Getenv("NACRE_MDD_CRASH_SEED"))
	logf, err := os.OpenFile(path.Join(dir, "ops.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	logln := func(format string, args ...any) { logf.WriteString(fmt.Sprintf(format, args...) + "\n") }
	s, err := Open(testConfig(path.Join(dir, "db")))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(uint64(seed), 42))
	dirs := map[string]fid.FID{"/": RootFID}
	files := map[string]fid.FID{}
	pick := func(m map[string]fid.FID) (string, fid.FID) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		k := keys[r.IntN(len(keys))]
		return k, m[k]
	}
	for i := 0; ; i++ {
		req := Req{Cred: Root(), Transno: uint64(i + 1)}
		name := fmt.Sprintf("n%d", r.IntN(40))
		pd, pf := pick(dirs)
		var args []string
		var op func() error
		switch k := r.IntN(10); {
		case k < 3:
			args = []string{"create", pd, name}
			op = func() error {
				a, err := s.Create(req, pf, name, Spec{Mode: 0o644, Layout: striped(uint32(i))})
				if err == nil {
					files[path.Join(pd, name)] = a.FID
				}
				return err
			}
		case k < 4:
			args = []string{"mkdir", pd, name}
			op = func() error {
				a, err := s.Mkdir(req, pf, name, Spec{Mode: 0o755})
				if err == nil {
					dirs[path.Join(pd, name)] = a.FID
				}
				return err
			}
		case k < 5 && len(files) > 0:
			fp, ff := pick(files)
			args = []string{"link", fp, pd, name}
			op = func() error {
				_, err := s.Link(req, ff, pf, name)
				if err == nil {
					files[path.Join(pd, name)] = ff
				}
				return err
			}
		case k < 7 && len(files) > 0:
			fp, _ := pick(files)
			args = []string{"unlink", path.Dir(fp), path.Base(fp)}
			op = func() error {
				_, err := s.Unlink(req, dirs[path.Dir(fp)], path.Base(fp))
				if err == nil {
					delete(files, fp)
				}
				return err
			}
		case k < 8 && len(dirs) > 1:
			dp, _ := pick(dirs)
			if dp == "/" {
				continue
			}
			args = []string{"rmdir", path.Dir(dp), path.Base(dp)}
			op = func() error {
				_, err := s.Rmdir(req, dirs[path.Dir(dp)], path.Base(dp))
				if err == nil {
					delete(dirs, dp)
				}
				return err
			}
		default:
			src := dirs
			if len(files) > 0 && r.IntN(2) == 0 {
				src = files
			}
			sp, sf := pick(src)
			to := path.Join(pd, name)
			if tf, ok := files[to]; sp == "/" || sp == to || ok && tf == sf {
				continue // renames that do nothing: the path model would move them
			}
			args = []string{"rename", path.Dir(sp), path.Base(sp), pd, name}
			op = func() error {
				_, err := s.Rename(req, dirs[path.Dir(sp)], path.Base(sp), pf, name, 0)
				if err == nil {
					for _, m := range []map[string]fid.FID{dirs, files} {
						delete(m, to)
						for k, v := range m {
							if k == sp || strings.HasPrefix(k, sp+"/") {
								delete(m, k)
								m[to+k[len(sp):]] = v
							}
						}
					}
				}
				return err
			}
		}
		logln("I %d %s", i, strings.Join(args, " "))
		err := op()
		logln("D %d %d", i, Errno(err))
		if i%40 == 39 {
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			logln("S %d", i)
		}
		if i%97 == 0 {
			q, err := s.AllocClientSeq()
			if err != nil {
				t.Fatal(err)
			}
			logln("Q %#x", q)
		}
	}
}

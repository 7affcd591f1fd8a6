package params

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A process killed outright (kill -9, a crash, a power cut of a container)
// leaves its parameter socket behind. Nothing would ever remove it: lctl
// tried every one on each call and named them all when nothing answered
// (hundreds on a test machine). So a socket whose process is gone is
// removed when a process starts serving in its directory, and by lctl when
// it finds one.

// socketPID returns the process ID in a parameter socket's name
// (PID.sock, PID-N.sock).
func socketPID(path string) (int, bool) {
	base := filepath.Base(path)
	if !socketName.MatchString(base) {
		return 0, false
	}
	s := strings.TrimSuffix(base, ".sock")
	if i := strings.IndexByte(s, '-'); i >= 0 {
		s = s[:i]
	}
	pid, err := strconv.Atoi(s)
	return pid, err == nil && pid > 0
}

// stale reports whether the socket at path belongs to a process that is
// gone: no process has its PID, and nothing listens on it. (Either alone
// is not proof: the PID may belong to a process of another PID namespace
// sharing the directory, and a socket is refused between its bind and its
// listen.)
func stale(path string) bool {
	pid, ok := socketPID(path)
	if !ok || pid == os.Getpid() {
		return false
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		return false // alive, or not ours to know (EPERM)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return refused(err)
}

// refused reports whether a dial failed because nothing listens at the
// path (or it is not a socket).
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTSOCK)
}

// removeStale removes the parameter sockets in dir whose processes are
// gone and returns how many it removed.
func removeStale(dir string) int {
	m, err := filepath.Glob(filepath.Join(dir, "*.sock"))
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range m {
		if stale(p) && os.Remove(p) == nil {
			n++
		}
	}
	return n
}

// Package mgsnode turns the ways an administrator names an MGS — a NID as
// Lustre has it, a NID with the gRPC port, a host:port — into gRPC
// addresses, for targets (--mgsnode) and for mounts (MGSNID[:MGSNID]:/FS).
package mgsnode

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// DefaultPort is the MGS's gRPC port when a NID names no port.
const DefaultPort = 9880

// Parse turns one MGS node into a gRPC address: a NID ("192.168.1.5@tcp",
// port DefaultPort), a NID with a port ("192.168.1.5@tcp:9999"), or a
// plain host:port.
func Parse(s string) (string, error) {
	nid, port := s, strconv.Itoa(DefaultPort)
	if at := strings.IndexByte(s, '@'); at >= 0 {
		if c := strings.LastIndexByte(s, ':'); c > at {
			nid, port = s[:c], s[c+1:]
		}
		n, err := lwire.ParseNID(nid)
		if err != nil {
			return "", fmt.Errorf("mgsnode %q: %w", s, err)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return "", fmt.Errorf("mgsnode %q: port %q", s, port)
		}
		return net.JoinHostPort(n.Addr.String(), port), nil
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return "", fmt.Errorf("mgsnode %q: want NID[:port] or host:port", s)
	}
	if _, err := strconv.ParseUint(p, 10, 16); err != nil {
		return "", fmt.Errorf("mgsnode %q: port %q", s, p)
	}
	return s, nil
}

// ParseSource splits a mount source, Lustre's MGSNID[:MGSNID...]:/FSNAME,
// into the MGS's gRPC addresses (one per failover node) and the file
// system name. Each MGSNID may be followed by its gRPC port
// ("10.0.0.1@tcp:9999:10.0.0.2@tcp:/fs"); a comma separates further NIDs
// of one node, of which the first is used.
func ParseSource(src string) (addrs []string, fsname string, err error) {
	i := strings.Index(src, ":/")
	if i <= 0 || i+2 >= len(src) {
		return nil, "", fmt.Errorf("mount source %q: want MGSNID[:MGSNID]:/FSNAME", src)
	}
	fsname = src[i+2:]
	if strings.ContainsAny(fsname, "/:") {
		return nil, "", fmt.Errorf("mount source %q: file system name %q", src, fsname)
	}
	parts := strings.Split(src[:i], ":")
	for k := 0; k < len(parts); k++ {
		node := parts[k]
		if c := strings.IndexByte(node, ','); c >= 0 {
			node = node[:c]
		}
		if !strings.Contains(node, "@") {
			return nil, "", fmt.Errorf("mount source %q: %q is not a NID", src, parts[k])
		}
		if k+1 < len(parts) && !strings.Contains(parts[k+1], "@") {
			node += ":" + parts[k+1]
			k++
		}
		a, err := Parse(node)
		if err != nil {
			return nil, "", fmt.Errorf("mount source %q: %w", src, err)
		}
		addrs = append(addrs, a)
	}
	return addrs, fsname, nil
}

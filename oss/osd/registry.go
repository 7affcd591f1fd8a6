package osd

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Driver is an OSD backend as registered by name: how to format a target
// directory for it and how to open one. Implementations must be safe for
// concurrent use.
type Driver interface {
	// Format makes dir (which must exist and be empty) a new, empty target.
	Format(ctx context.Context, dir string, opts FormatOptions) error
	// Open starts the target formatted in dir, recovering it first if it
	// was not closed cleanly.
	Open(ctx context.Context, dir string, opts OpenOptions) (Device, error)
}

// FormatOptions are what every backend's Format takes; backends have their
// own richer formats for tuning (osdfile.Format).
type FormatOptions struct {
	// Label names the target, as Lustre's mkfs --fsname/--index make
	// "fsname-OSTxxxx". Required.
	Label string
}

// OpenOptions are what every backend's Open takes.
type OpenOptions struct {
	// Logger receives the backend's log lines; nil means slog.Default().
	Logger *slog.Logger
}

var registry struct {
	sync.RWMutex
	drivers map[string]Driver // by name; protected by the RWMutex
}

// Register makes a backend available by name, for Format and Open. Backends
// call it from init. It panics if name is empty or taken, or d is nil, as
// sql.Register does: those are programming errors.
func Register(name string, d Driver) {
	registry.Lock()
	defer registry.Unlock()
	if name == "" || d == nil {
		panic("osd: Register with an empty name or a nil driver")
	}
	if _, dup := registry.drivers[name]; dup {
		panic("osd: Register called twice for backend " + name)
	}
	if registry.drivers == nil {
		registry.drivers = make(map[string]Driver)
	}
	registry.drivers[name] = d
}

// Drivers returns the names of the registered backends, sorted.
func Drivers() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.drivers))
	for n := range registry.drivers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func driver(name string) (Driver, error) {
	registry.RLock()
	d, ok := registry.drivers[name]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: unknown OSD backend %q (registered: %v; is its package imported?)", ErrInvalid, name, Drivers())
	}
	return d, nil
}

// Format formats dir as a target of the backend registered as name. It fails
// with ErrInvalid for an unknown backend, and otherwise as that backend's
// Format does.
func Format(ctx context.Context, name, dir string, opts FormatOptions) error {
	d, err := driver(name)
	if err != nil {
		return err
	}
	return d.Format(ctx, dir, opts)
}

// Open opens the target in dir with the backend registered as name. It fails
// with ErrInvalid for an unknown backend, and otherwise as that backend's
// Open does.
func Open(ctx context.Context, name, dir string, opts OpenOptions) (Device, error) {
	d, err := driver(name)
	if err != nil {
		return nil, err
	}
	return d.Open(ctx, dir, opts)
}

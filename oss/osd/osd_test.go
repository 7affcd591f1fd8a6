package osd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
)

func TestErrno(t *testing.T) {
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{ErrExist, syscall.EEXIST},
		{fmt.Errorf("osd-file x: create [0x1:0x2:0x0]: %w", ErrExist), syscall.EEXIST},
		{fmt.Errorf("wrapped: %w", ErrNotExist), syscall.ENOENT},
		{ErrNoSpace, syscall.ENOSPC},
		{ErrInvalid, syscall.EINVAL},
		{ErrTooLarge, syscall.EFBIG},
		{ErrCorrupt, syscall.EIO},
		{fmt.Errorf("%w: %w", ErrReadOnly, errors.New("disk")), syscall.EROFS},
		{ErrClosed, syscall.ENODEV},
		{ErrBusy, syscall.EBUSY},
		{ErrTxDone, syscall.EINVAL},
		{context.Canceled, syscall.ECANCELED},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), syscall.ETIMEDOUT},
		{errors.New("something else"), syscall.EIO},
	} {
		if got := Errno(c.err); got != c.want {
			t.Errorf("Errno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

type fakeDriver struct{ formatted string }

func (f *fakeDriver) Format(ctx context.Context, dir string, opts FormatOptions) error {
	f.formatted = dir + ":" + opts.Label
	return nil
}

func (f *fakeDriver) Open(ctx context.Context, dir string, opts OpenOptions) (Device, error) {
	return nil, errors.New("fake: no devices")
}

func TestRegistry(t *testing.T) {
	fd := &fakeDriver{}
	Register("fake-test", fd)
	if !slices.Contains(Drivers(), "fake-test") {
		t.Fatalf("Drivers() = %v", Drivers())
	}
	if err := Format(context.Background(), "fake-test", "/d", FormatOptions{Label: "L"}); err != nil || fd.formatted != "/d:L" {
		t.Fatalf("Format: %v, %q", err, fd.formatted)
	}
	if _, err := Open(context.Background(), "fake-test", "/d", OpenOptions{}); err == nil {
		t.Fatal("Open did not pass the driver's error on")
	}
	if _, err := Open(context.Background(), "no-such-backend", "/d", OpenOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open of an unknown backend: %v", err)
	}
	for name, fn := range map[string]func(){
		"duplicate": func() { Register("fake-test", fd) },
		"empty":     func() { Register("", fd) },
		"nil":       func() { Register("fake-nil", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register %s did not panic", name)
				}
			}()
			fn()
		}()
	}
}

package errs

import (
	"errors"
	"fmt"
	"testing"
)

func TestKindOf(t *testing.T) {
	base := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, Other},
		{"plain", base, Other},
		{"direct", Errorf(NotExist, "fs %q", "x"), NotExist},
		{"wrapped once", fmt.Errorf("op: %w", Errorf(Exist, "index taken")), Exist},
		{"outermost wins", Errorf(Unavailable, "etcd: %w", Errorf(Timeout, "deadline")), Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := KindOf(tt.err); got != tt.want {
				t.Fatalf("KindOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestErrorfKeepsChain(t *testing.T) {
	base := errors.New("disk on fire")
	err := Errorf(Internal, "ost0001: write: %w", base)
	if !errors.Is(err, base) {
		t.Fatal("errors.Is lost the wrapped error")
	}
	if err.Error() != "ost0001: write: disk on fire" {
		t.Fatalf("message = %q", err.Error())
	}
	if !Is(err, Internal) || Is(err, Invalid) {
		t.Fatal("Is disagrees with the kind")
	}
}

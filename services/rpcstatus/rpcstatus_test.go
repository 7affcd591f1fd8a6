package rpcstatus

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/internal/errs"
)

func TestErrorCodes(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{errs.Errorf(errs.Invalid, "bad fsname"), codes.InvalidArgument},
		{fmt.Errorf("wrapped: %w", errs.Errorf(errs.NotExist, "no fs")), codes.NotFound},
		{errs.Errorf(errs.Exist, "taken"), codes.AlreadyExists},
		{errs.Errorf(errs.Unavailable, "etcd"), codes.Unavailable},
		{errs.Errorf(errs.Compacted, "gone"), codes.OutOfRange},
		{errs.Errorf(errs.NotEmpty, "pool"), codes.FailedPrecondition},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{fmt.Errorf("plain"), codes.Unknown},
		{status.Error(codes.PermissionDenied, "as is"), codes.PermissionDenied},
	}
	for _, tt := range tests {
		got := status.Code(Error(tt.err))
		if got != tt.want {
			t.Errorf("Error(%v) code = %v, want %v", tt.err, got, tt.want)
		}
		if st := status.Convert(Error(tt.err)); st.Message() != tt.err.Error() && tt.want != codes.PermissionDenied {
			t.Errorf("message %q lost: %q", tt.err.Error(), st.Message())
		}
	}
	if Error(nil) != nil {
		t.Fatal("Error(nil) != nil")
	}
	for k := range toCode {
		if got := Kind(Error(errs.Errorf(k, "x"))); got != k {
			t.Errorf("round trip of %v gave %v", k, got)
		}
	}
}

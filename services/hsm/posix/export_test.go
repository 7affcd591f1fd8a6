package posix

import "github.com/nacrefs/nacre/internal/fid"

// SetTestHookRemoving sets testHookRemoving (nil clears it).
func SetTestHookRemoving(h func(fid.FID)) { testHookRemoving = h }

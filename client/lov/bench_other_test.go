//go:build !linux

package lov_test

import "os"

// dropPageCache does nothing where posix_fadvise is not at hand: reads of
// the local baseline may then come from the page cache.
func dropPageCache(*os.File, int64) {}

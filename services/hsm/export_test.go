package hsm

import hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"

// SetTestHookSaveFinished sets testHookSaveFinished (nil clears it).
func SetTestHookSaveFinished(h func(a *hsmv1.Action) error) { testHookSaveFinished = h }

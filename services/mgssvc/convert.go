package mgssvc

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nacrefs/nacre/mgs"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

// FilesystemProto converts a filesystem to its wire form.
func FilesystemProto(fs mgs.Filesystem) *mgsv1.Filesystem {
	return &mgsv1.Filesystem{Name: fs.Name, Uuid: fs.UUID, CreateTime: timestamppb.New(fs.CreateTime), Revision: fs.Revision}
}

// TargetProto converts a target to its wire form.
func TargetProto(t mgs.Target) *mgsv1.Target {
	st := mgsv1.TargetState_TARGET_STATE_DOWN
	if t.Up {
		st = mgsv1.TargetState_TARGET_STATE_UP
	}
	return &mgsv1.Target{
		Fsname:       t.FSName,
		Kind:         mgsv1.TargetKind(t.Kind),
		Index:        t.Index,
		Name:         t.Label(),
		Nids:         t.NIDs,
		FailoverNids: t.FailoverNIDs,
		Path:         t.Path,
		Uuid:         t.UUID,
		State:        st,
		RegisterTime: timestamppb.New(t.RegisterTime),
		Revision:     t.Revision,
		StatusAddr:   t.StatusAddr,
	}
}

// PoolProto converts a pool to its wire form.
func PoolProto(p mgs.Pool) *mgsv1.Pool {
	osts := p.OSTs
	if osts == nil {
		osts = []uint32{}
	}
	return &mgsv1.Pool{Fsname: p.FSName, Name: p.Name, Osts: osts, Revision: p.Revision}
}

// ParamProto converts a parameter to its wire form.
func ParamProto(p mgs.Param) *mgsv1.Param {
	return &mgsv1.Param{Name: p.Name, Value: p.Value, Revision: p.Revision}
}

// ConfigProto converts a filesystem snapshot to its wire form.
func ConfigProto(c mgs.FSConfig) *mgsv1.ClientConfig {
	out := &mgsv1.ClientConfig{Filesystem: FilesystemProto(c.Filesystem), Revision: c.Revision}
	for _, t := range c.Targets {
		out.Targets = append(out.Targets, TargetProto(t))
	}
	for _, p := range c.Pools {
		out.Pools = append(out.Pools, PoolProto(p))
	}
	for _, p := range c.Params {
		out.Params = append(out.Params, ParamProto(p))
	}
	return out
}

// EventProto converts a watch event to its wire form.
func EventProto(e mgs.Event) *mgsv1.ConfigEvent {
	out := &mgsv1.ConfigEvent{Revision: e.Revision, Type: mgsv1.ConfigEvent_TYPE_PUT}
	if e.Type == mgs.EventDelete {
		out.Type = mgsv1.ConfigEvent_TYPE_DELETE
	}
	switch {
	case e.Filesystem != nil:
		out.Object = &mgsv1.ConfigEvent_Filesystem{Filesystem: FilesystemProto(*e.Filesystem)}
	case e.Target != nil:
		out.Object = &mgsv1.ConfigEvent_Target{Target: TargetProto(*e.Target)}
	case e.Liveness != nil:
		st := mgsv1.TargetState_TARGET_STATE_DOWN
		if e.Liveness.Up {
			st = mgsv1.TargetState_TARGET_STATE_UP
		}
		out.Object = &mgsv1.ConfigEvent_Liveness{Liveness: &mgsv1.TargetLiveness{
			Kind: mgsv1.TargetKind(e.Liveness.Kind), Index: e.Liveness.Index,
			Name: mgs.TargetName(e.Liveness.Kind, e.Liveness.Index), State: st,
		}}
	case e.Pool != nil:
		out.Object = &mgsv1.ConfigEvent_Pool{Pool: PoolProto(*e.Pool)}
	case e.Param != nil:
		out.Object = &mgsv1.ConfigEvent_Param{Param: ParamProto(*e.Param)}
	}
	return out
}

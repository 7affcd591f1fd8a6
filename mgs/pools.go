package mgs

import (
	"context"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nacrefs/nacre/internal/errs"
)

func (s *Store) listPools(ctx context.Context, fsname string) ([]Pool, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.poolsPrefix(fsname), clientv3.WithPrefix())
	if err != nil {
		return nil, s.etcdErr("list pools of "+fsname, err)
	}
	return decodePools(resp.Kvs)
}

func decodePools(kvs []*mvccpb.KeyValue) ([]Pool, error) {
	out := make([]Pool, 0, len(kvs))
	for _, kv := range kvs {
		p, err := decode[Pool](string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		p.Revision = kv.ModRevision
		out = append(out, p)
	}
	return out, nil
}

// ListPools returns a filesystem's pools sorted by name. NotExist if the
// filesystem does not exist.
func (s *Store) ListPools(ctx context.Context, fsname string) ([]Pool, error) {
	if _, err := s.GetFilesystem(ctx, fsname); err != nil {
		return nil, err
	}
	return s.listPools(ctx, fsname)
}

// CreatePool creates an empty pool (lctl pool_new). Exist if it is there.
func (s *Store) CreatePool(ctx context.Context, fsname, name string) (Pool, error) {
	if err := ValidatePoolName(name); err != nil {
		return Pool{}, err
	}
	if _, err := s.GetFilesystem(ctx, fsname); err != nil {
		return Pool{}, err
	}
	p := Pool{FSName: fsname, Name: name, OSTs: []uint32{}}
	key := s.poolKey(fsname, name)
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, mustJSON(p))).
		Commit()
	if err != nil {
		return Pool{}, s.etcdErr("create pool "+fsname+"."+name, err)
	}
	if !resp.Succeeded {
		return Pool{}, errs.Errorf(errs.Exist, "pool %s.%s already exists", fsname, name)
	}
	p.Revision = resp.Header.Revision
	s.log.Info("pool created", "fsname", fsname, "pool", name)
	return p, nil
}

// AddToPool adds OSTs to a pool (lctl pool_add). All or nothing: NotExist
// if the pool or an OST is unknown, Exist if an OST is in the pool already.
func (s *Store) AddToPool(ctx context.Context, fsname, name string, osts []uint32) (Pool, error) {
	if len(osts) == 0 {
		return Pool{}, errs.Errorf(errs.Invalid, "pool_add %s.%s: no OSTs given", fsname, name)
	}
	ts, err := s.ListTargets(ctx, fsname)
	if err != nil {
		return Pool{}, err
	}
	for _, idx := range osts {
		if !slices.ContainsFunc(ts, func(t Target) bool { return t.Kind == KindOST && t.Index == idx }) {
			return Pool{}, errs.Errorf(errs.NotExist, "pool_add %s.%s: %s is not registered", fsname, name, TargetLabel(fsname, KindOST, idx))
		}
	}
	return s.updatePool(ctx, fsname, name, func(p *Pool) error {
		for _, idx := range osts {
			if slices.Contains(p.OSTs, idx) {
				return errs.Errorf(errs.Exist, "pool_add %s.%s: %s is already in the pool", fsname, name, TargetLabel(fsname, KindOST, idx))
			}
			p.OSTs = append(p.OSTs, idx)
		}
		return nil
	})
}

// RemoveFromPool removes OSTs from a pool (lctl pool_remove). All or
// nothing: NotExist if an OST is not in the pool.
func (s *Store) RemoveFromPool(ctx context.Context, fsname, name string, osts []uint32) (Pool, error) {
	if len(osts) == 0 {
		return Pool{}, errs.Errorf(errs.Invalid, "pool_remove %s.%s: no OSTs given", fsname, name)
	}
	return s.updatePool(ctx, fsname, name, func(p *Pool) error {
		for _, idx := range osts {
			i := slices.Index(p.OSTs, idx)
			if i < 0 {
				return errs.Errorf(errs.NotExist, "pool_remove %s.%s: %s is not in the pool", fsname, name, TargetLabel(fsname, KindOST, idx))
			}
			p.OSTs = slices.Delete(p.OSTs, i, i+1)
		}
		return nil
	})
}

// DestroyPool deletes an empty pool (lctl pool_destroy). NotEmpty if it
// still has OSTs, as Lustre refuses.
func (s *Store) DestroyPool(ctx context.Context, fsname, name string) error {
	p, err := s.getPool(ctx, fsname, name)
	if err != nil {
		return err
	}
	if len(p.OSTs) > 0 {
		return errs.Errorf(errs.NotEmpty, "pool_destroy %s.%s: pool still has %d OSTs; remove them first", fsname, name, len(p.OSTs))
	}
	key := s.poolKey(fsname, name)
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", p.Revision)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return s.etcdErr("destroy pool "+fsname+"."+name, err)
	}
	if !resp.Succeeded {
		return errs.Errorf(errs.Conflict, "pool_destroy %s.%s: the pool changed meanwhile; try again", fsname, name)
	}
	s.log.Info("pool destroyed", "fsname", fsname, "pool", name)
	return nil
}

func (s *Store) getPool(ctx context.Context, fsname, name string) (Pool, error) {
	if err := ValidateFSName(fsname); err != nil {
		return Pool{}, err
	}
	if err := ValidatePoolName(name); err != nil {
		return Pool{}, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	key := s.poolKey(fsname, name)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return Pool{}, s.etcdErr("get pool "+fsname+"."+name, err)
	}
	if len(resp.Kvs) == 0 {
		return Pool{}, errs.Errorf(errs.NotExist, "pool %s.%s does not exist", fsname, name)
	}
	p, err := decode[Pool](key, resp.Kvs[0].Value)
	p.Revision = resp.Kvs[0].ModRevision
	return p, err
}

// updatePool is a compare-and-swap loop on one pool record: concurrent
// pool_add calls each retry on the other's result, so none is lost.
func (s *Store) updatePool(ctx context.Context, fsname, name string, mutate func(*Pool) error) (Pool, error) {
	for attempt := 0; attempt < maxRegisterAttempts; attempt++ {
		p, err := s.getPool(ctx, fsname, name)
		if err != nil {
			return Pool{}, err
		}
		if err := mutate(&p); err != nil {
			return Pool{}, err
		}
		slices.Sort(p.OSTs)
		key := s.poolKey(fsname, name)
		cctx, cancel := s.call(ctx)
		resp, err := s.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", p.Revision)).
			Then(clientv3.OpPut(key, mustJSON(p))).
			Commit()
		cancel()
		if err != nil {
			return Pool{}, s.etcdErr("update pool "+fsname+"."+name, err)
		}
		if resp.Succeeded {
			p.Revision = resp.Header.Revision
			return p, nil
		}
	}
	return Pool{}, errs.Errorf(errs.Unavailable, "pool %s.%s: too much contention; try again", fsname, name)
}

// SetParam stores a persistent parameter after checking its name against the
// catalog and its value against the type; nothing is written otherwise.
func (s *Store) SetParam(ctx context.Context, name, value string) (Param, error) {
	pn, err := ParseParamName(name)
	if err != nil {
		return Param{}, err
	}
	name = pn.String() // as targets name themselves
	v, err := pn.Spec.NormalizeValue(value)
	if err != nil {
		return Param{}, errs.Errorf(errs.Invalid, "set_param %s: %w", name, err)
	}
	// One round trip: the write happens only if the named filesystem exists
	// at that moment (a glob names no single filesystem).
	cctx, cancel := s.call(ctx)
	defer cancel()
	txn := s.cli.Txn(cctx)
	if !hasMeta(pn.FS) {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(s.fsKey(pn.FS)), ">", 0))
	}
	resp, err := txn.Then(clientv3.OpPut(s.paramKey(name), v)).Commit()
	if err != nil {
		return Param{}, s.etcdErr("set_param "+name, err)
	}
	if !resp.Succeeded {
		return Param{}, errs.Errorf(errs.NotExist, "set_param %s: filesystem %q does not exist", name, pn.FS)
	}
	s.log.Info("param set", "param", name, "value", v)
	return Param{Name: name, Value: v, Revision: resp.Header.Revision}, nil
}

// GetParam returns one stored parameter by its exact name (globs included).
func (s *Store) GetParam(ctx context.Context, name string) (Param, error) {
	pn, err := ParseParamName(name)
	if err != nil {
		return Param{}, err
	}
	name = pn.String()
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.paramKey(name))
	if err != nil {
		return Param{}, s.etcdErr("get_param "+name, err)
	}
	if len(resp.Kvs) == 0 {
		return Param{}, errs.Errorf(errs.NotExist, "parameter %s is not set", name)
	}
	return Param{Name: name, Value: string(resp.Kvs[0].Value), Revision: resp.Kvs[0].ModRevision}, nil
}

// DeleteParam removes a stored parameter (lctl set_param -P -d).
func (s *Store) DeleteParam(ctx context.Context, name string) error {
	pn, err := ParseParamName(name)
	if err != nil {
		return err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Delete(ctx, s.paramKey(pn.String()))
	if err == nil && resp.Deleted == 0 && name != pn.String() {
		// Stored as spelled, before names were stored as targets name
		// themselves: it goes too.
		resp, err = s.cli.Delete(ctx, s.paramKey(name))
	}
	if err != nil {
		return s.etcdErr("delete param "+name, err)
	}
	if resp.Deleted == 0 {
		return errs.Errorf(errs.NotExist, "parameter %s is not set", name)
	}
	s.log.Info("param deleted", "param", name)
	return nil
}

// ListParams returns stored parameters whose names match a glob (empty: all).
func (s *Store) ListParams(ctx context.Context, pattern string) ([]Param, error) {
	if pattern != "" {
		if err := checkGlob(pattern, "parameter"); err != nil {
			return nil, err
		}
	}
	return s.listParams(ctx, pattern)
}

func (s *Store) listParams(ctx context.Context, pattern string) ([]Param, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.paramsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, s.etcdErr("list params", err)
	}
	out := make([]Param, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), s.paramsPrefix())
		if pattern != "" && !globMatch(pattern, name) {
			continue
		}
		out = append(out, Param{Name: name, Value: string(kv.Value), Revision: kv.ModRevision})
	}
	return out, nil
}

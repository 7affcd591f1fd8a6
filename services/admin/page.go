package admin

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/nacrefs/nacre/internal/errs"
)

// Pages of the Admin API's lists: items in a stable order by a unique
// key; a page token names the last key given and the query it belongs
// to, so that a token of another query is refused, not misread.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

type pageToken struct {
	After string `json:"a"`
	Query string `json:"q"`
}

// page returns the page of items (sorted by key, keys unique) after
// token's key, at most size long, and the token of the next page ("" at
// the end). query names the request's other parameters.
func page[T any](items []T, key func(T) string, size int32, token, query string) ([]T, string, error) {
	n := int(size)
	switch {
	case size < 0:
		return nil, "", errs.Errorf(errs.Invalid, "page_size %d is negative", size)
	case size == 0:
		n = DefaultPageSize
	case size > MaxPageSize:
		n = MaxPageSize
	}
	start := 0
	if token != "" {
		raw, err := base64.RawURLEncoding.DecodeString(token)
		var pt pageToken
		if err == nil {
			err = json.Unmarshal(raw, &pt)
		}
		if err != nil {
			return nil, "", errs.Errorf(errs.Invalid, "page_token is not one this API gave out")
		}
		if pt.Query != query {
			return nil, "", errs.Errorf(errs.Invalid, "page_token belongs to another query (%s, not %s)", pt.Query, query)
		}
		start, _ = slices.BinarySearchFunc(items, pt.After, func(it T, k string) int { return strings.Compare(key(it), k) })
		if start < len(items) && key(items[start]) == pt.After {
			start++
		}
	}
	end := min(start+n, len(items))
	next := ""
	if end < len(items) {
		b, _ := json.Marshal(pageToken{After: key(items[end-1]), Query: query})
		next = base64.RawURLEncoding.EncodeToString(b)
	}
	return items[start:end], next, nil
}

// maskTree is a field mask as a tree of field names; nil keeps a whole
// field.
type maskTree map[string]maskTree

// parseMask checks mask's paths against md (paths go through singular and
// repeated message fields; "*" alone means every field) and returns them
// as a tree; an empty mask returns def.
func parseMask(md protoreflect.MessageDescriptor, mask *fieldmaskpb.FieldMask, def maskTree) (maskTree, error) {
	paths := mask.GetPaths()
	if len(paths) == 0 {
		return def, nil
	}
	if len(paths) == 1 && paths[0] == "*" {
		return nil, nil
	}
	root := maskTree{}
	for _, p := range paths {
		node, d := root, md
		parts := strings.Split(p, ".")
		for i, name := range parts {
			if d == nil {
				return nil, errs.Errorf(errs.Invalid, "read_mask path %q: %s is not a message", p, strings.Join(parts[:i], "."))
			}
			f := d.Fields().ByName(protoreflect.Name(name))
			if f == nil {
				return nil, errs.Errorf(errs.Invalid, "read_mask path %q: %s has no field %q", p, d.Name(), name)
			}
			last := i == len(parts)-1
			child, seen := node[name]
			if seen && child == nil {
				break // the whole field is kept already
			}
			if last {
				node[name] = nil
				break
			}
			if child == nil {
				child = maskTree{}
				node[name] = child
			}
			node, d = child, nil
			if f.Kind() == protoreflect.MessageKind && !f.IsMap() {
				d = f.Message()
			}
		}
	}
	return root, nil
}

// has reports whether the mask keeps the field at path (or some of it).
func (t maskTree) has(path ...string) bool {
	node := t
	for _, p := range path {
		if node == nil {
			return true
		}
		child, ok := node[p]
		if !ok {
			return false
		}
		node = child
	}
	return true
}

// apply clears every field of m the mask does not keep.
func (t maskTree) apply(m protoreflect.Message) {
	if t == nil {
		return
	}
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		sub, ok := t[string(f.Name())]
		switch {
		case !ok:
			m.Clear(f)
		case sub == nil:
		case f.IsList():
			l := v.List()
			for i := range l.Len() {
				sub.apply(l.Get(i).Message())
			}
		case f.Kind() == protoreflect.MessageKind && !f.IsMap():
			sub.apply(v.Message())
		}
		return true
	})
}

package osdfile

import (
	"context"

	"github.com/nacrefs/nacre/oss/osd"
)

// Name is the name osd-file registers under.
const Name = "file"

func init() { osd.Register(Name, driver{}) }

// driver adapts Format and Open to osd.Driver.
type driver struct{}

var _ osd.Driver = driver{}

// Format implements osd.Driver, with the journal sized after the store.
func (driver) Format(ctx context.Context, dir string, opts osd.FormatOptions) error {
	return Format(ctx, dir, DefaultFormatConfig(opts.Label))
}

// Open implements osd.Driver with the default Config.
func (driver) Open(ctx context.Context, dir string, opts osd.OpenOptions) (osd.Device, error) {
	cfg := DefaultConfig()
	cfg.Logger = opts.Logger
	d, err := Open(ctx, dir, cfg)
	if err != nil {
		return nil, err
	}
	return d, nil
}

package posix_test

import (
	"errors"
	"os"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/services/hsm/posix"
)

func posixNew(fsys *client.FS, root string) (*posix.Copytool, error) {
	return posix.New(posix.Config{FS: fsys, Root: root})
}

func removeAll(p string) error {
	if err := os.Remove(p); err != nil {
		return err
	}
	return os.Remove(p + ".sha256")
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

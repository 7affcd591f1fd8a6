package mdd_test

import (
	"fmt"
	"os"

	"github.com/nacrefs/nacre/mds/mdd"
)

func Example() {
	dir, _ := os.MkdirTemp("", "mdt")
	defer os.RemoveAll(dir)
	cfg := mdd.DefaultConfig(dir)
	cfg.SyncInterval = 0 // sync by hand below
	s, err := mdd.Open(cfg)
	if err != nil {
		panic(err)
	}
	defer s.Close()

	root := mdd.Req{Cred: mdd.Root()}
	alice := mdd.Req{Cred: mdd.Cred{UID: 1000, GID: 1000, Umask: 0o022}, Transno: 1}
	home, _ := s.Mkdir(root, mdd.RootFID, "home", mdd.Spec{Mode: 0o777})
	f, _ := s.Create(alice, home.FID, "notes", mdd.Spec{Mode: 0o666})
	fmt.Printf("%s mode %o uid %d\n", "notes", f.Mode&0o777, f.UID)

	bob := mdd.Req{Cred: mdd.Cred{UID: 1001, GID: 1001}}
	_, err = s.Setattr(bob, f.FID, mdd.SetAttr{Valid: mdd.AttrMode, Mode: 0o777})
	fmt.Println("bob chmod:", mdd.Errno(err))

	paths, _ := s.FID2Path(f.FID)
	fmt.Println(paths)
	s.Sync()
	fmt.Println("last committed", s.LastCommitted())
	// Output:
	// notes mode 644 uid 1000
	// bob chmod: operation not permitted
	// [/home/notes]
	// last committed 1
}

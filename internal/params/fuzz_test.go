package params

import (
	"encoding/json"
	"testing"
)

// FuzzHandle: whatever a socket client sends, the answer is a response,
// never a panic, and a set that fails changes nothing.
func FuzzHandle(f *testing.F) {
	for _, s := range []string{
		`{"op":"get","patterns":["osc.*.max_rpcs_in_flight"]}`,
		`{"op":"set","assign":[{"pattern":"osc.*.max_dirty_mb","value":"7"},{"pattern":"osc.[","value":"1"}]}`,
		`{"op":"list","patterns":["osc.*"],"recursive":true}`,
		`{"op":"devices"}`,
		`{"op":"set","assign":[{"pattern":"*.*.*","value":"x"}],"partial":true,"dry_run":true}`,
		`{"op":"get","patterns":["","..","\\","osc/*/stats"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req Request
		if json.Unmarshal(b, &req) != nil {
			return
		}
		r, ts := testRegistry(t)
		resp := Handle(r, req)
		if req.Op == "set" && resp.Error != nil {
			for n, tu := range ts {
				if tu.sets.Load() != 0 {
					t.Fatalf("a failed set changed %s: %+v", n, resp.Error)
				}
			}
		}
	})
}

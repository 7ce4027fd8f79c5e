package decision

import (
	"os"
	"testing"
)

// The shipped example parses and means what its comments say.
func TestExampleConfig(t *testing.T) {
	data, err := os.ReadFile("../../examples/decision/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := newService(t, string(data), newClock(t0).opts())
	c, _ := serveGRPC(t, s)
	login := request("edge", desc("tenant", "acme", "path", "/login"))
	steps := []step{}
	for i := range 5 {
		steps = append(steps, step{"login", login, OK, codes_(OK), []uint32{uint32(4 - i)}, []uint32{5}})
	}
	steps = append(steps,
		step{"login 6", login, OVER, codes_(OVER), nil, nil},
		step{"other path", request("edge", desc("tenant", "acme", "path", "/")), OK, codes_(OK), nil, []uint32{50}},
		step{"gold", request("edge", desc("api_key", "k1"), desc("plan", "gold")), OK, codes_(OK, OK), nil, []uint32{noLimit, 100}},
		step{"probe", request("edge", desc("user_agent", "kube-probe/1.30")), OK, codes_(OK), nil, []uint32{noLimit}},
	)
	for range 10 {
		steps = append(steps, step{"key", request("edge", desc("api_key", "k2")), OK, codes_(OK), nil, nil})
	}
	steps = append(steps, step{"key 11", request("edge", desc("api_key", "k2")), OVER, codes_(OVER), nil, []uint32{10}})
	runSteps(t, c, steps)
}

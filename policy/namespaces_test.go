package policy

import (
	"strings"
	"testing"
)

// TestNamespaceSetSettle: a namespace's later instances count with its
// first instance's store settings, as Kong's one store per namespace; a
// difference is reported, naming both instances; other namespaces and
// equal settings are left alone.
func TestNamespaceSetSettle(t *testing.T) {
	parse := func(raw string) *AdvancedConfig {
		t.Helper()
		c, err := ParseAdvanced([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var s NamespaceSet
	first := parse(`{"limit":[3],"window_size":[60],"namespace":"mix","strategy":"redis","sync_rate":0,"redis":{"host":"r1"}}`)
	same := parse(`{"limit":[9],"window_size":[10],"namespace":"mix","strategy":"redis","sync_rate":0,"redis":{"host":"r1"}}`)
	local := parse(`{"limit":[3],"window_size":[60],"namespace":"mix"}`)
	other := parse(`{"limit":[3],"window_size":[60],"namespace":"alone"}`)
	if err := s.Settle(first, "routes[0].plugins[0]"); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(same, "routes[1].plugins[0]"); err != nil {
		t.Errorf("same settings: %v", err)
	}
	err := s.Settle(local, "routes[2].plugins[0]")
	if err == nil || !strings.Contains(err.Error(), "routes[2].plugins[0]") || !strings.Contains(err.Error(), "routes[0].plugins[0]") {
		t.Errorf("other settings: %v, want an error naming both instances", err)
	}
	if local.Strategy != StrategyRedis || local.SyncRate == nil || *local.SyncRate != 0 || *local.Redis.Host != "r1" {
		t.Errorf("later instance settings %q %v, want the first's", local.Strategy, local.SyncRate)
	}
	if local.Limit[0] != 3 || same.Limit[0] != 9 {
		t.Error("limits were changed; only store settings are the namespace's")
	}
	if err := s.Settle(other, "routes[3].plugins[0]"); err != nil || other.Strategy != StrategyLocal {
		t.Errorf("another namespace: %v, strategy %q", err, other.Strategy)
	}
}

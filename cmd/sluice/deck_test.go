package main

import (
	"strings"
	"testing"
)

// TestValidateDeckDump: sluice validate reads the gateway's decK dump
// fixture with its references resolved from the environment, and names
// each field whose reference it cannot resolve when they are missing.
func TestValidateDeckDump(t *testing.T) {
	const fixture = "internal/gateway/testdata/deck/kong.yml"
	env := []string{
		"DECK_UPSTREAM_HOST=127.0.0.1", "DECK_UPSTREAM_PORT=8080",
		`SLUICE_ORDERS_KEYS={"alice": "k1"}`, "DECK_ALICE_SECOND_KEY=k2",
		"BILLING_ALICE_PASSWORD=a", "BILLING_BOB_PASSWORD=b", "DECK_ALICE_JWT_SECRET=s",
		"DECK_BOB_KEY=k3", "DECK_CAROL_KEY=k4",
	}
	cmd := command(t, "validate", fixture)
	cmd.Env = append(cmd.Env, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("validate with its environment: %v\n%s", err, out)
	}
	cmd = command(t, "validate", fixture)
	cmd.Env = append(cmd.Env, env[2:]...) // no upstream host or port
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "services[0].host: environment variable 'DECK_UPSTREAM_HOST' present in state file but not set") {
		t.Fatalf("validate without DECK_UPSTREAM_HOST: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "k1") {
		t.Errorf("a resolved secret in the output:\n%s", out)
	}
}

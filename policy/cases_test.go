package policy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/policytest"
)

// TestAdvancedCases runs the adapters' shared behaviour cases straight
// through the engine, so a case that fails in an adapter but passes here
// points at the adapter.
func TestAdvancedCases(t *testing.T) {
	cases := policytest.AdvancedCases()
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			reg := policy.NewRegistry(policy.RegistryOptions{})
			defer reg.Close()
			cfg, err := policy.ParseAdvanced([]byte(c.Config))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			a, err := policy.NewAdvanced(cfg, reg)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			defer a.Close()
			for i, st := range c.Steps {
				id := st.Identity
				path := id.Path
				if path == "" {
					path = "/"
				}
				r := policy.Request{
					ClientIP:     id.IP,
					Consumer:     policy.Consumer{ID: id.ConsumerID, Username: id.ConsumerUsername, CustomID: id.ConsumerCustomID},
					CredentialID: id.CredentialID,
					ServiceID:    id.ServiceID,
					RouteID:      id.RouteID,
					Path:         path,
					Method:       http.MethodGet,
					Header: func(name string) string {
						for k, v := range id.Headers {
							if strings.EqualFold(k, name) {
								return v
							}
						}
						return ""
					},
					Now: c.Start.Add(st.At),
				}
				if id.Quota != nil {
					r.Quota.Limits, r.Quota.WindowTypeSet = id.Quota.Limits()
				}
				res, err := a.Check(context.Background(), &r)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				ans := policytest.Answer{Status: res.Status, Body: string(res.Body), Headers: http.Header{}}
				for _, h := range res.Headers {
					ans.Headers.Add(h.Name, h.Value)
				}
				if diff := st.Check(ans); diff != "" {
					t.Errorf("step %d (at %s):\n%s", i, st.At, diff)
				}
			}
		})
	}
}

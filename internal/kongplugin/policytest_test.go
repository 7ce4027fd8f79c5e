package kongplugin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/Kong/go-pdk/client"
	"github.com/Kong/go-pdk/entities"

	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
	"github.com/seed-008287da/sluice/policy/policytest"
)

// TestAdvancedBehaviourCases runs the behaviour cases shared with the
// gateway (package policytest) through the fake Kong and the real
// sluice-rate-limiting handler, with the clock set to each step's time. A
// step's quota is in kong.ctx.shared as sluice-dimensions writes it, read
// through shared_key (without a key there, the identifier still counts).
func TestAdvancedBehaviourCases(t *testing.T) {
	for _, tc := range policytest.AdvancedCases() {
		t.Run(tc.Name, func(t *testing.T) {
			p, clk := newTestProcess(t, Options{})
			clk.Set(tc.Start)
			conf := tc.Config
			for _, st := range tc.Steps {
				if st.Identity.Quota != nil {
					conf = strings.TrimSuffix(strings.TrimSpace(conf), "}") + `, "shared_key": "` + DefaultSharedKey + `"}`
					break
				}
			}
			cfg := instance[*RateLimitingConfig](t, p.NewRateLimiting, conf)
			for i, st := range tc.Steps {
				clk.Set(tc.Start.Add(st.At))
				k := kongtest.New(t, kongRequest(st.Identity))
				k.Run(cfg.Access)
				a := policytest.Answer{Headers: k.ResponseHeaders()}
				if e := k.Exit(); e != nil {
					a = policytest.Answer{Status: e.Status, Body: string(e.Body), Headers: e.Headers}
				}
				if diff := st.Check(a); diff != "" {
					t.Errorf("step %d (at %s, %+v):\n%s(headers %v, logs %q)", i, st.At, st.Identity, diff, a.Headers, k.Logs())
				}
			}
		})
	}
}

// kongRequest scripts the fake Kong with a case's identity.
func kongRequest(id policytest.Identity) kongtest.Request {
	r := kongtest.Request{ForwardedIP: id.IP, Path: id.Path}
	if id.ConsumerID != "" {
		r.Consumer = &entities.Consumer{Id: id.ConsumerID, Username: id.ConsumerUsername, CustomId: id.ConsumerCustomID}
	}
	if id.CredentialID != "" {
		r.Credential = &client.AuthenticatedCredential{Id: id.CredentialID, ConsumerId: id.ConsumerID}
	}
	if id.ServiceID != "" {
		r.Service = &entities.Service{Id: id.ServiceID}
	}
	if id.RouteID != "" {
		r.Route = &entities.Route{Id: id.RouteID}
	}
	if len(id.Headers) > 0 {
		r.Headers = http.Header{}
		for k, v := range id.Headers {
			r.Headers.Set(k, v)
		}
	}
	if id.Quota != nil {
		rec := sharedRecord{}
		rec.Quota, rec.QuotaAlgorithmSet = id.Quota.Limits()
		r.Shared = map[string]any{DefaultSharedKey: rec.encode()}
	}
	return r
}

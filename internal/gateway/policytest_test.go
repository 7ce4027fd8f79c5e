package gateway

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/clientip"
	"github.com/seed-008287da/sluice/policy/policytest"
)

// TestAdvancedBehaviourCases runs the behaviour cases shared with the Kong
// plugin and the engine (package policytest) through the gateway over real
// sockets: a configuration built from each case, the client IP sent in
// X-Real-IP from a trusted 127.0.0.1, consumers authenticated by key-auth,
// and the gateway's clock (Options.Now) set to each step's time.
func TestAdvancedBehaviourCases(t *testing.T) {
	cases := policytest.AdvancedCases()
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	up := echoUpstream(t)
	resolver, err := clientip.New(clientip.Options{TrustedIPs: []string{"127.0.0.1"}, RealIPHeader: clientip.XRealIP})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			cc, err := newCaseConfig(&tc, up.URL)
			if err != nil {
				t.Fatal(err)
			}
			var now atomic.Pointer[time.Time]
			start := tc.Start
			now.Store(&start)
			_, base := startGateway(t, cc.config, Options{ClientIP: resolver, Now: func() time.Time { return *now.Load() }})
			for i, st := range tc.Steps {
				at := tc.Start.Add(st.At)
				now.Store(&at)
				path := st.Identity.Path
				if path == "" {
					path = "/"
				}
				r := do(t, "GET", base+path, cc.headers(st.Identity))
				a := policytest.Answer{Headers: r.header}
				switch {
				case r.status == 200 && r.header.Get("X-Upstream") == "echo":
				case r.status == 200:
					t.Fatalf("step %d: 200 not from the upstream: %v %s", i, r.header, r.body)
				default:
					a = policytest.Answer{Status: r.status, Body: r.body, Headers: r.header}
				}
				if diff := st.Check(a); diff != "" {
					t.Errorf("step %d (at %s, %+v):\n%s(headers %v)", i, st.At, st.Identity, diff, r.header)
				}
			}
		})
	}
}

// caseConfig is a gateway configuration that can present every identity
// of one case: a service per ServiceID (ids kept), a route per distinct
// (service, route, authenticated) triple told apart by host, key-auth on
// the authenticated routes only (anonymous requests stay anonymous), and a
// consumer with a key per credential. The case's plugin is global. Steps
// with a quota add a global sluice-dimensions plugin keyed by the header
// X-Case-Quota, with one inline override per distinct quota; its key is
// unused unless the case's identifier is "dimension".
//
// The gateway always matches a route and a service, and key-auth always
// yields both a consumer and a credential, so an identity lacking one of
// them gets a generated one: its own service or route id, "consumer-of-"
// plus the credential id, "cred-of-" plus the consumer id, "user-" plus
// the consumer id as the username of a consumer with neither username nor
// custom_id (Kong requires one). Each is a
// counter of its own, as the missing value is for the other adapters,
// except for an identifier naming exactly the missing attribute.
type caseConfig struct {
	config string
	hosts  map[routeKey]string
	keys   map[string]string // credential id -> key
	quotas map[string]string // quotaName -> X-Case-Quota value
}

// quotaName identifies a quota by value.
func quotaName(q *policytest.Quota) string { return fmt.Sprint(*q) }

type routeKey struct {
	service, route string
	authed         bool
}

func identityCredential(id policytest.Identity) (consumerID, credID string) {
	consumerID, credID = id.ConsumerID, id.CredentialID
	if consumerID == "" && credID != "" {
		consumerID = "consumer-of-" + credID
	}
	if credID == "" && consumerID != "" {
		credID = "cred-of-" + consumerID
	}
	return consumerID, credID
}

func newCaseConfig(tc *policytest.Case, upstream string) (*caseConfig, error) {
	cc := &caseConfig{hosts: map[routeKey]string{}, keys: map[string]string{}, quotas: map[string]string{}}
	var overrides []map[string]any
	type credential struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	type consumer struct {
		ID          string       `json:"id"`
		Username    string       `json:"username,omitempty"`
		CustomID    string       `json:"custom_id,omitempty"`
		Credentials []credential `json:"keyauth_credentials"`
	}
	type route struct {
		ID        string           `json:"id"`
		Name      string           `json:"name"`
		Hosts     []string         `json:"hosts"`
		Paths     []string         `json:"paths"`
		StripPath bool             `json:"strip_path"`
		Plugins   []map[string]any `json:"plugins,omitempty"`
	}
	type service struct {
		ID     string   `json:"id"`
		Name   string   `json:"name"`
		URL    string   `json:"url"`
		Routes []*route `json:"routes"`
	}
	var services []*service
	byID := map[string]*service{}
	consumers := map[string]*consumer{}
	var order []string
	for _, st := range tc.Steps {
		id := st.Identity
		svcID := id.ServiceID
		if svcID == "" {
			svcID = "case-service"
		}
		s := byID[svcID]
		if s == nil {
			s = &service{ID: svcID, Name: fmt.Sprintf("s%d", len(services)), URL: upstream}
			byID[svcID] = s
			services = append(services, s)
		}
		if q := id.Quota; q != nil {
			if _, ok := cc.quotas[quotaName(q)]; !ok {
				v := fmt.Sprintf("q%d", len(cc.quotas))
				cc.quotas[quotaName(q)] = v
				o := map[string]any{"dimension": "quota", "value": v, "limit": q.Limit, "window_size": q.WindowSize}
				if q.WindowType != "" {
					o["window_type"] = q.WindowType
				}
				overrides = append(overrides, o)
			}
		}
		consumerID, credID := identityCredential(id)
		rk := routeKey{svcID, id.RouteID, consumerID != ""}
		if _, ok := cc.hosts[rk]; !ok {
			n := len(cc.hosts)
			host := fmt.Sprintf("r%d.cases.test", n)
			cc.hosts[rk] = host
			rt := &route{ID: id.RouteID, Name: fmt.Sprintf("r%d", n), Hosts: []string{host}, Paths: []string{"/"}}
			if rt.ID == "" {
				rt.ID = fmt.Sprintf("case-route-%d", n)
			}
			if rk.authed {
				rt.Plugins = []map[string]any{{"name": "key-auth"}}
			}
			s.Routes = append(s.Routes, rt)
		}
		if consumerID == "" {
			continue
		}
		c := consumers[consumerID]
		if c == nil {
			c = &consumer{ID: consumerID, Username: id.ConsumerUsername, CustomID: id.ConsumerCustomID}
			if c.Username == "" && c.CustomID == "" {
				c.Username = "user-" + consumerID // Kong requires one of the two
			}
			consumers[consumerID] = c
			order = append(order, consumerID)
		}
		if _, ok := cc.keys[credID]; !ok {
			cc.keys[credID] = "key-" + credID
			c.Credentials = append(c.Credentials, credential{ID: credID, Key: cc.keys[credID]})
		}
	}
	plugins := []map[string]any{{"name": "rate-limiting-advanced", "config": json.RawMessage(tc.Config)}}
	if len(overrides) > 0 {
		plugins = append(plugins, map[string]any{"name": "sluice-dimensions", "config": map[string]any{
			"key_prefix": "case",
			"dimensions": []map[string]any{{"name": "quota", "type": "header", "header": "X-Case-Quota"}},
			"overrides":  overrides,
		}})
	}
	doc := map[string]any{
		"_format_version": "3.0",
		"services":        services,
		"plugins":         plugins,
	}
	if len(order) > 0 {
		cs := make([]*consumer, len(order))
		for i, id := range order {
			cs[i] = consumers[id]
		}
		doc["consumers"] = cs
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding the config of case %q: %w", tc.Name, err)
	}
	cc.config = string(b)
	return cc, nil
}

// headers returns the request headers that present id: its own headers,
// the route's host, the client IP and the credential's key.
func (cc *caseConfig) headers(id policytest.Identity) map[string]string {
	h := map[string]string{}
	for k, v := range id.Headers {
		h[k] = v
	}
	consumerID, credID := identityCredential(id)
	svcID := id.ServiceID
	if svcID == "" {
		svcID = "case-service"
	}
	h["Host"] = cc.hosts[routeKey{svcID, id.RouteID, consumerID != ""}]
	h["X-Real-IP"] = id.IP
	if id.Quota != nil {
		h["X-Case-Quota"] = cc.quotas[quotaName(id.Quota)]
	}
	if consumerID != "" {
		h["apikey"] = cc.keys[credID]
	}
	return h
}

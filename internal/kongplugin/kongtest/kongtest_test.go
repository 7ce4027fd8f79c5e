package kongtest

import (
	"net/http"
	"slices"
	"testing"

	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/entities"
)

func TestAnswers(t *testing.T) {
	k := New(t, Request{
		Path: "/a/b", RawQuery: "x=1&y=2", IP: "192.0.2.9", ForwardedIP: "198.51.100.7",
		Headers:    http.Header{"X-Custom-Header": {"v1", "v2"}},
		Consumers:  []entities.Consumer{{Id: "c9", Username: "bob", Tags: []string{"group:gold"}}},
		Route:      &entities.Route{Id: "r1", Name: "orders"},
		Shared:     map[string]any{"from_lua": "hi"},
		TrustedIPs: []string{"192.0.2.9"},
	})
	calls := k.Run(func(kong *pdk.PDK) {
		check := func(what string, got, want any) {
			t.Helper()
			if got != want {
				t.Errorf("%s = %v, want %v", what, got, want)
			}
		}
		v, _ := kong.Client.GetIp()
		check("ip", v, "192.0.2.9")
		v, _ = kong.Client.GetForwardedIp()
		check("forwarded ip", v, "198.51.100.7")
		v, _ = kong.Request.GetHeader("x_custom_header")
		check("header by underscore name", v, "v1")
		v, _ = kong.Request.GetQueryArg("y")
		check("query arg", v, "2")
		v, _ = kong.Request.GetPathWithQuery()
		check("path with query", v, "/a/b?x=1&y=2")
		c, _ := kong.Client.GetConsumer()
		check("no consumer", c.Id, "")
		c, _ = kong.Client.LoadConsumer("bob", true)
		check("load by username", c.Id, "c9")
		r, _ := kong.Router.GetRoute()
		check("route", r.Name, "orders")
		s, _ := kong.Router.GetService()
		check("no service", s.Id, "")
		ok, _ := kong.IP.IsTrusted("192.0.2.9")
		check("trusted", ok, true)
		v, _ = kong.Ctx.GetSharedString("from_lua")
		check("shared from an earlier plugin", v, "hi")
		_ = kong.Ctx.SetShared("n", 3)
		_ = kong.Response.SetHeaders(map[string][]string{"x-a": {"1"}})
		_ = kong.Log.Warn("careful ", 1)
	})
	if len(calls) != 14 || calls[0] != "kong.client.get_ip" {
		t.Errorf("calls = %q", calls)
	}
	if k.Shared()["n"] != float64(3) {
		t.Errorf("shared n = %#v (numbers come back as float64)", k.Shared()["n"])
	}
	if k.ResponseHeaders().Get("X-A") != "1" {
		t.Errorf("headers = %v", k.ResponseHeaders())
	}
	if !slices.Equal(k.Logs(), []string{"warn: careful 1"}) {
		t.Errorf("logs = %q", k.Logs())
	}
	// A later phase sees the shared context and records its own calls.
	calls = k.Run(func(kong *pdk.PDK) {
		if n, _ := kong.Ctx.GetSharedFloat("n"); n != 3 {
			t.Errorf("n in the next phase = %v", n)
		}
		kong.Response.Exit(418, []byte("teapot"), map[string][]string{"X-B": {"2"}})
	})
	if !slices.Equal(calls, []string{"kong.ctx.shared.get", "kong.response.exit"}) {
		t.Errorf("calls = %q", calls)
	}
	if e := k.Exit(); e == nil || e.Status != 418 || string(e.Body) != "teapot" || e.Headers.Get("X-B") != "2" {
		t.Errorf("exit = %+v", e)
	}
	if len(k.Calls()) != 16 {
		t.Errorf("all calls = %d", len(k.Calls()))
	}
}

package kongplugin

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
)

func inspectCall(t *testing.T, method, url string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil && res.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
	}
	return res.StatusCode
}

// The plugin server's local listener: a consumer limited through the
// PDK is listed in top, its counter read, reset, and its next request
// allowed.
func TestInspectListener(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := p.ListenInspect(ctx, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr.String()
	cfg := instance[*RateLimitingConfig](t, p.NewRateLimiting, `{"limit": [2], "window_size": [60], "namespace": "insp",
		"__plugin_id": "p-9", "plugin_instance_name": "per-consumer"}`)
	req := kongtest.Request{Consumer: consumer("c1")}
	for i, denied := range []bool{false, false, true} {
		k := kongtest.New(t, req)
		k.Run(cfg.Access)
		if (k.Exit() != nil) != denied {
			t.Fatalf("request %d: exit %+v, want denied %v", i, k.Exit(), denied)
		}
	}
	var list struct {
		Data []InspectedPlugin `json:"data"`
	}
	if code := inspectCall(t, "GET", base+"/rate-limiting/plugins", &list); code != 200 || len(list.Data) != 1 ||
		list.Data[0].ID != "p-9" || list.Data[0].InstanceName != "per-consumer" || list.Data[0].Namespace != "insp" {
		t.Fatalf("plugins: %d %+v", code, list)
	}
	var top struct {
		Data []struct {
			Top []struct {
				Identifier string `json:"identifier"`
				Denied     int64  `json:"denied"`
			} `json:"top"`
		} `json:"data"`
	}
	if code := inspectCall(t, "GET", base+"/rate-limiting/top?plugin=per-consumer", &top); code != 200 || len(top.Data) != 1 ||
		len(top.Data[0].Top) != 1 || top.Data[0].Top[0].Identifier != "c1" || top.Data[0].Top[0].Denied != 1 {
		t.Fatalf("top: %d %+v", code, top)
	}
	var c struct {
		Windows []struct {
			Current int64 `json:"current"`
		} `json:"windows"`
	}
	if code := inspectCall(t, "GET", base+"/rate-limiting/plugins/p-9/counters/c1", &c); code != 200 || len(c.Windows) != 1 || c.Windows[0].Current != 3 {
		t.Fatalf("counter: %d %+v; want 3 counted", code, c)
	}
	if code := inspectCall(t, "DELETE", base+"/rate-limiting/plugins/insp/counters/c1", nil); code != 204 {
		t.Fatalf("DELETE: %d", code)
	}
	if code := inspectCall(t, "GET", base+"/rate-limiting/plugins/p-9/counters/c1", &map[string]any{}); code != 404 {
		t.Fatalf("counter after reset: %d, want 404", code)
	}
	k := kongtest.New(t, req)
	k.Run(cfg.Access)
	if k.Exit() != nil {
		t.Fatalf("denied after reset: %+v", k.Exit())
	}
	if _, err := p.ListenInspect(ctx, "0.0.0.0:0", ""); err == nil {
		t.Fatal("the inspect listener opened on a wildcard address")
	}
	// A DNS-rebinding page (another Host, its own Origin) reaches nothing;
	// nor does a DELETE of a value never counted claim a reset.
	rq, _ := http.NewRequest("DELETE", base+"/rate-limiting/plugins/insp/counters/c1", nil)
	rq.Host = "rebind.evil.example:" + strings.Split(addr.String(), ":")[1]
	rq.Header.Set("Origin", "http://"+rq.Host)
	if res, err := http.DefaultClient.Do(rq); err != nil || res.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("DELETE with a foreign Host: %v %v; want 421", res, err)
	}
	if code := inspectCall(t, "DELETE", base+"/rate-limiting/plugins/insp/counters/nobody", &map[string]any{}); code != 404 {
		t.Fatalf("DELETE of nothing: %d, want 404", code)
	}
}

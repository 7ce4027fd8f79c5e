package gateway

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestRejectedConfigHidesSecrets loads configurations that are rejected
// with a secret in the offending field: the error, the log and the reload
// history name the field and never carry the secret.
func TestRejectedConfigHidesSecrets(t *testing.T) {
	env := map[string]string{
		"SVC_URL":      "http://bob:vault-url-pw@bad host/",
		"PROTO":        "vault-proto-secret",
		"KEY_NAME":     "vault key name secret",
		"DECK_HOST":    "deck host secret!",
		"DUP_KEY":      "vault-dup-key",
		"RL_NAMESPACE": "vault|namespace",
	}
	cases := []struct {
		name, config string
		field        string // the path the error must name
		secret       string // what must appear nowhere
		shown        string // what the error shows instead ("" for nothing)
	}{
		{"url userinfo", `
services:
- name: s
  url: "http://alice:url-pw-1@bad host/"
`, "services[0].url", "url-pw-1", `"http://xxxxx@bad host/"`},
		{"redis url userinfo", `
services:
- name: s
  url: "redis://:redis-pw-2@bad host:6379"
`, "services[0].url", "redis-pw-2", `"redis://xxxxx@bad host:6379"`},
		{"vault url", `
services:
- name: s
  url: "{vault://env/SVC_URL}"
`, "services[0].url", "vault-url-pw", `"{vault://env/SVC_URL}"`},
		{"vault protocol", `
services:
- name: s
  host: example.com
  protocol: "{vault://env/PROTO}"
`, "services[0].protocol", "vault-proto-secret", `"{vault://env/PROTO}"`},
		{"deck host", `
services:
- name: s
  url: http://example.com
  routes:
  - name: r
    hosts: ['${{ env "DECK_HOST" }}']
`, "services[0].routes[0].hosts[0]", "deck host secret", `"${{ env \"DECK_HOST\" }}"`},
		{"vault plugin field", `
services:
- name: s
  url: http://example.com
plugins:
- name: key-auth
  config:
    key_names: ["{vault://env/KEY_NAME}"]
`, "plugins[0].config.key_names[0]", "vault key name secret", `"{vault://env/KEY_NAME}"`},
		{"duplicate key-auth key", `
consumers:
- username: a
  keyauth_credentials:
  - key: dup-key-3
- username: b
  keyauth_credentials:
  - key: dup-key-3
`, "consumers[1].keyauth_credentials[0]", "dup-key-3", ""},
		{"duplicate vault key-auth key", `
consumers:
- username: a
  keyauth_credentials:
  - key: "{vault://env/DUP_KEY}"
- username: b
  keyauth_credentials:
  - key: "{vault://env/DUP_KEY}"
`, "consumers[1].keyauth_credentials[0]", "vault-dup-key", ""},
		{"jwt secret", `
consumers:
- username: a
  jwt_secrets:
  - key: iss
    secret: 918273645
`, "consumers[0].jwt_secrets[0].secret", "918273645", ""},
		{"basic-auth password", `
consumers:
- username: a
  basicauth_credentials:
  - username: a
    password: 827364519
`, "consumers[0].basicauth_credentials[0].password", "827364519", ""},
		{"redis password", `
plugins:
- name: rate-limiting-advanced
  config:
    limit: [5]
    window_size: [60]
    strategy: redis
    sync_rate: 0
    redis:
      host: 127.0.0.1
      password: 736451982
`, "plugins[0].config.redis.password", "736451982", ""},
		{"redis host userinfo", `
plugins:
- name: rate-limiting-advanced
  config:
    limit: [5]
    window_size: [60]
    strategy: redis
    sync_rate: 0
    redis:
      host: "user:host-pw-4@redis.example"
      port: 6379
`, "plugins[0].config.redis.host", "host-pw-4", ""},
		{"sentinel host userinfo", `
plugins:
- name: rate-limiting-advanced
  config:
    limit: [5]
    window_size: [60]
    strategy: redis
    sync_rate: 0
    redis:
      sentinel_master: m
      sentinel_role: master
      sentinel_nodes: [{host: "sentinel-pw-5@10.0.0.1", port: 26379}]
`, "plugins[0].config.redis.sentinel_nodes[0].host", "sentinel-pw-5", ""},
		{"cluster ip userinfo", `
plugins:
- name: rate-limiting-advanced
  config:
    limit: [5]
    window_size: [60]
    strategy: redis
    sync_rate: 0
    redis:
      cluster_nodes: [{ip: ":cluster-pw-6@10.0.0.1", port: 6379}]
`, "plugins[0].config.redis.cluster_nodes[0].ip", "cluster-pw-6", ""},
		{"cluster address userinfo", `
plugins:
- name: rate-limiting-advanced
  config:
    limit: [5]
    window_size: [60]
    strategy: redis
    sync_rate: 0
    redis:
      cluster_addresses: ["u:address-pw-7@10.0.0.1:6379"]
`, "plugins[0].config.redis.cluster_addresses", "address-pw-7", `xxxxx@10.0.0.1:6379`},
		{"oss redis_host userinfo", `
plugins:
- name: rate-limiting
  config:
    minute: 5
    policy: redis
    redis_host: "u:oss-pw-8@redis.example"
    redis_port: 6379
`, "plugins[0].config.redis_host", "oss-pw-8", ""},
		{"oss redis.host userinfo", `
plugins:
- name: rate-limiting
  config:
    minute: 5
    policy: redis
    redis: {host: "oss-pw-9@redis.example", port: 6379}
`, "plugins[0].config.redis.host", "oss-pw-9", ""},
		{"concurrency redis host userinfo", `
plugins:
- name: sluice-concurrency
  config:
    limit: 5
    strategy: redis
    redis: {host: "u:lease-pw-10@redis.example"}
`, "plugins[0].config.redis.host", "lease-pw-10", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			g, err := New(Options{LookupEnv: lookupIn(env), Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			lerr := g.Load([]byte("_format_version: \"3.0\"\n"+c.config), "test")
			if lerr == nil {
				t.Fatal("config accepted")
			}
			msg := lerr.Error()
			if !strings.Contains(msg, c.field+":") {
				t.Errorf("error does not name %s:\n%s", c.field, msg)
			}
			if c.shown != "" && !strings.Contains(msg, c.shown) {
				t.Errorf("error does not show %s:\n%s", c.shown, msg)
			}
			reloads, err := json.Marshal(g.Reloads())
			if err != nil {
				t.Fatal(err)
			}
			for where, s := range map[string]string{"error": msg, "log": logs.String(), "reloads": string(reloads), "validate": errString(g.Validate([]byte(c.config)))} {
				if strings.Contains(s, c.secret) {
					t.Errorf("the %s carries the secret %q:\n%s", where, c.secret, s)
				}
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

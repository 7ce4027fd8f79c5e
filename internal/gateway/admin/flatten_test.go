package admin

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPostConfigFlattenErrors: with ?flatten_errors=1, as in Kong (and as
// the Kong Ingress Controller asks), the 400 lists the errors by entity in
// flattened_errors: each entity's type, name, id and tags, its body
// without nested entities and with the foreign key to the entity around
// it, its field and entity errors; nested entities come before their
// parent. Secrets in the echoed bodies are redacted. Errors of no entity
// stay in fields.
func TestPostConfigFlattenErrors(t *testing.T) {
	_, _, adm, _ := setup(t, v1)
	bad := `
_format_version: "3.0"
_unknown_top: 1
services:
  - name: s
    id: 0b5a0a3c-3f30-4d2c-9a4d-6c1c2b0e8e11
    tags: [team-a]
    url: http://127.0.0.1:1
    colour: red
    routes:
      - name: r
        paths: [nope]
        hosts: [a.example]
        plugins:
          - name: rate-limiting
            config: {minute: -1, policy: redis, redis: {host: h, password: s3cret-pw}}
      - name: empty
plugins:
  - name: no-such-plugin
`
	code, m := post(t, adm+"/config?flatten_errors=1", "application/x-yaml", []byte(bad))
	if code != 400 {
		t.Fatalf("%d %v", code, m)
	}
	raw, _ := json.Marshal(m["flattened_errors"])
	if strings.Contains(string(raw), "s3cret-pw") {
		t.Errorf("a password in flattened_errors: %s", raw)
	}
	var flat []flatEntity
	if err := json.Unmarshal(raw, &flat); err != nil {
		t.Fatal(err)
	}
	type summary struct {
		typ, name string
		errs      []string // field or "@entity"
	}
	var got []summary
	for _, f := range flat {
		s := summary{typ: f.EntityType, name: f.EntityName}
		for _, e := range f.Errors {
			if e.Type == "entity" {
				s.errs = append(s.errs, "@entity")
			} else {
				s.errs = append(s.errs, e.Field)
			}
		}
		got = append(got, s)
	}
	want := []summary{
		{"plugin", "rate-limiting", []string{"config.minute", "config"}},
		{"route", "r", []string{"paths.1"}},
		{"route", "empty", []string{"@entity"}},
		{"service", "s", []string{"colour"}},
		{"plugin", "no-such-plugin", []string{"name"}},
	}
	if len(got) != len(want) {
		t.Fatalf("flattened_errors %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i].typ != want[i].typ || got[i].name != want[i].name || strings.Join(got[i].errs, ",") != strings.Join(want[i].errs, ",") {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	svc := flat[3]
	if svc.EntityID != "0b5a0a3c-3f30-4d2c-9a4d-6c1c2b0e8e11" || len(svc.EntityTags) != 1 || svc.EntityTags[0] != "team-a" {
		t.Errorf("service id %q tags %v", svc.EntityID, svc.EntityTags)
	}
	if _, nested := svc.Entity["routes"]; nested || svc.Entity["colour"] != "red" {
		t.Errorf("service body %v: want it without its routes, with its fields", svc.Entity)
	}
	if fk, _ := flat[1].Entity["service"].(map[string]any); fk["id"] != svc.EntityID {
		t.Errorf("route body %v: want service {id: %s}", flat[1].Entity, svc.EntityID)
	}
	if hosts, _ := flat[1].Entity["hosts"].([]any); len(hosts) != 1 {
		t.Errorf("route body %v: want its own list fields kept", flat[1].Entity)
	}
	if _, fk := flat[0].Entity["route"]; fk {
		t.Errorf("plugin body %v: a route without a UUID id gives no foreign key", flat[0].Entity)
	}
	fields, _ := m["fields"].(map[string]any)
	if _, ok := fields["_unknown_top"]; !ok || len(fields) != 1 {
		t.Errorf("fields %v, want only the top-level error", fields)
	}
	// Without the flag, fields lists every error as before.
	_, m = post(t, adm+"/config", "application/x-yaml", []byte(bad))
	if _, ok := m["flattened_errors"]; ok {
		t.Error("flattened_errors without flatten_errors=1")
	}
	if fields, _ := m["fields"].(map[string]any); len(fields) < 5 {
		t.Errorf("fields without the flag: %v", fields)
	}
}

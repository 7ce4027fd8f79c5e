package admin

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

// flatEntity is one entity's errors in the answer to POST
// /config?flatten_errors=1, Kong's flattened_errors (kong/db/errors.lua),
// which the Kong Ingress Controller turns into events on its resources.
type flatEntity struct {
	EntityName string         `json:"entity_name,omitempty"`
	EntityID   string         `json:"entity_id,omitempty"`
	EntityTags []string       `json:"entity_tags,omitempty"`
	EntityType string         `json:"entity_type"`
	Entity     map[string]any `json:"entity"`
	Errors     []flatError    `json:"errors"`
}

// flatError is an error of a field of the entity ("field") or of the
// entity as a whole ("entity").
type flatError struct {
	Type    string `json:"type"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// entityLists are the lists of entities at a declarative file's top level.
var entityLists = map[string]bool{
	"services": true, "routes": true, "plugins": true, "consumers": true, "consumer_groups": true,
	"upstreams": true, "targets": true, "certificates": true, "snis": true, "ca_certificates": true,
	"vaults": true, "key_sets": true, "keys": true, "acls": true, "keyauth_credentials": true,
	"basicauth_credentials": true, "hmacauth_credentials": true, "jwt_secrets": true,
	"oauth2_credentials": true, "mtls_auth_credentials": true,
}

// credentials are the entities a consumer holds.
var credentials = []string{"plugins", "acls", "keyauth_credentials", "basicauth_credentials", "hmacauth_credentials",
	"jwt_secrets", "oauth2_credentials", "mtls_auth_credentials"}

// nestedLists are the lists of entities nested in an entity, by the list
// the entity sits in: Kong's one-to-many relationships.
var nestedLists = map[string][]string{
	"services":        {"routes", "plugins"},
	"routes":          {"plugins"},
	"consumers":       credentials,
	"consumer_groups": {"plugins"},
	"upstreams":       {"targets"},
	"certificates":    {"snis"},
	"key_sets":        {"keys"},
}

var pathToken = regexp.MustCompile(`[^.\[\]]+|\[\d+\]`)

var uuidText = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// flatten sorts errs by the entity of the file (redacted, as GET /config
// shows it) each one's path leads to. It returns the entities with their
// errors, in the order of their first error but each nested entity before
// the entity holding it, as in Kong, and the errors that belong to no
// entity (the file's own fields, YAML syntax).
func flatten(data []byte, errs kongconf.Errors) ([]flatEntity, kongconf.Errors) {
	var root any
	if red, err := redactConfig(data); err == nil {
		_ = yaml.Unmarshal(red, &root)
	}
	top, _ := root.(map[string]any)
	if top == nil {
		return nil, errs
	}
	byPath := map[string]*flatEntity{}
	var order []string
	var rest kongconf.Errors
	for _, fe := range errs {
		chain, prefix := entityAt(top, fe.Path)
		if len(chain) == 0 {
			rest = append(rest, fe)
			continue
		}
		f := byPath[prefix]
		if f == nil {
			f = newFlatEntity(chain)
			byPath[prefix] = f
			order = append(order, prefix)
		}
		if name := strings.TrimPrefix(strings.TrimPrefix(fe.Path, prefix), "."); name != "" {
			f.Errors = append(f.Errors, flatError{Type: "field", Field: kongField(name), Message: fe.Message})
		} else {
			f.Errors = append(f.Errors, flatError{Type: "entity", Message: fe.Message})
		}
	}
	out := make([]flatEntity, 0, len(order))
	done := map[string]bool{}
	var emit func(p string)
	emit = func(p string) {
		if done[p] {
			return
		}
		done[p] = true
		for _, q := range order {
			if strings.HasPrefix(q, p+".") {
				emit(q)
			}
		}
		out = append(out, *byPath[p])
	}
	for _, p := range order {
		emit(p)
	}
	return out, rest
}

// nested is an entity of the file and the list it sits in.
type nested struct {
	list string
	ent  map[string]any
}

// entityAt walks path in the file and returns the entities it passes
// through, outermost first (the last is the one the path is in), and the
// path of the last one.
func entityAt(top map[string]any, path string) ([]nested, string) {
	toks := pathToken.FindAllString(path, -1)
	var chain []nested
	prefix := ""
	cur := top
	for i := 0; i+1 < len(toks); i += 2 {
		name, idx := toks[i], toks[i+1]
		isList := entityLists[name]
		if len(chain) > 0 {
			isList = slices.Contains(nestedLists[chain[len(chain)-1].list], name)
		}
		if !isList || !strings.HasPrefix(idx, "[") {
			break
		}
		n, _ := strconv.Atoi(idx[1 : len(idx)-1])
		list, _ := cur[name].([]any)
		if n >= len(list) {
			break
		}
		child, ok := list[n].(map[string]any)
		if !ok {
			break
		}
		if prefix != "" {
			prefix += "."
		}
		prefix += name + idx
		chain = append(chain, nested{name, child})
		cur = child
	}
	if !strings.HasPrefix(path, prefix) {
		return nil, ""
	}
	return chain, prefix
}

// newFlatEntity describes the last entity of chain as Kong does: its
// nested entities left out, and, when the entity around it has a UUID id,
// the foreign key to that one set.
func newFlatEntity(chain []nested) *flatEntity {
	last := chain[len(chain)-1]
	body := make(map[string]any, len(last.ent)+1)
	for k, v := range last.ent {
		if _, isList := v.([]any); isList && slices.Contains(nestedLists[last.list], k) {
			continue
		}
		body[k] = v
	}
	if len(chain) > 1 {
		parent := chain[len(chain)-2]
		fk := singular(parent.list)
		if parent.list == "key_sets" {
			fk = "set"
		}
		if id, _ := parent.ent["id"].(string); uuidText.MatchString(id) {
			if _, set := body[fk]; !set {
				body[fk] = map[string]any{"id": id}
			}
		}
	}
	f := &flatEntity{EntityType: singular(last.list), Entity: body}
	if s, _ := last.ent["name"].(string); s != "" {
		f.EntityName = s
	}
	if s, _ := last.ent["id"].(string); uuidText.MatchString(s) {
		f.EntityID = s
	}
	if tags, ok := last.ent["tags"].([]any); ok {
		for _, t := range tags {
			s, ok := t.(string)
			if !ok {
				f.EntityTags = nil
				break
			}
			f.EntityTags = append(f.EntityTags, s)
		}
	}
	return f
}

var indexToken = regexp.MustCompile(`\[(\d+)\]`)

// kongField writes a field path as Kong's flattened errors do: list
// elements as ".n", counted from 1 (paths[0].x is paths.1.x).
func kongField(path string) string {
	return indexToken.ReplaceAllStringFunc(path, func(m string) string {
		n, _ := strconv.Atoi(m[1 : len(m)-1])
		return "." + strconv.Itoa(n+1)
	})
}

// singular is Kong's: a list's name without its final s.
func singular(list string) string { return strings.TrimSuffix(list, "s") }

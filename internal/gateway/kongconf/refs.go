package kongconf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/seed-008287da/sluice/policy/field"
)

// LookupEnv returns the value of an environment variable and whether it is
// set, as os.LookupEnv does.
type LookupEnv func(name string) (string, bool)

// deckTemplate is one decK substitution: ${{ env "DECK_X" }}, optionally
// piped to toInt, toBool or toFloat.
var deckTemplate = regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`)

var deckEnvCall = regexp.MustCompile(`^env\s+"([^"]*)"\s*(?:\|\s*(toInt|toBool|toFloat)\s*)?$`)

// resolveRefs replaces, in every scalar value under n, decK's environment
// substitutions and Kong env-vault references by their values, recording
// each one that cannot be resolved at its field path. A plain (unquoted)
// scalar that was a single substitution is typed again from its value, as
// decK's rendering of the file text before parsing it gives.
func resolveRefs(n *yaml.Node, path string, env refEnv, errs *errList) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			resolveRefs(c, path, env, errs)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			resolveRefs(c, index(path, i), env, errs)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			kp := join(path, k.Value)
			if strings.Contains(k.Value, "${{") {
				errs.add(kp, "a decK environment substitution in a field name is not supported")
			}
			resolveRefs(n.Content[i+1], kp, env, errs)
		}
	case yaml.AliasNode:
		// resolved where the anchor is
	case yaml.ScalarNode:
		resolveScalar(n, path, env, errs)
	}
}

func resolveScalar(n *yaml.Node, path string, env refEnv, errs *errList) {
	v := n.Value
	ref := v
	if strings.Contains(v, "${{") {
		whole := false
		if loc := deckTemplate.FindStringIndex(v); loc != nil && loc[0] == 0 && loc[1] == len(v) {
			whole = true
		}
		failed := false
		out := deckTemplate.ReplaceAllStringFunc(v, func(t string) string {
			inner := deckTemplate.FindStringSubmatch(t)[1]
			s, err := deckEnv(inner, env.lookup)
			if err != nil {
				errs.add(path, "%s", err)
				failed = true
			}
			return s
		})
		if !failed && strings.Count(v, "${{") != len(deckTemplate.FindAllString(v, -1)) {
			errs.add(path, "an unterminated decK substitution (want ${{ env \"DECK_NAME\" }})")
			failed = true
		}
		if failed {
			n.Value = ""
			return
		}
		n.Value = out
		if whole && n.Style == 0 && (n.Tag == "" || n.Tag == "!!str" || n.Tag == "!!int" || n.Tag == "!!bool" || n.Tag == "!!float" || n.Tag == "!!null") {
			n.Tag = "" // typed again from the substituted text
		}
		v = out
	}
	if isVaultRef(v) {
		s, err := vaultEnv(v, env)
		if err != nil {
			errs.add(path, "%s", err)
			n.Value = ""
			return
		}
		n.Value, n.Tag, n.Style = s, "!!str", yaml.DoubleQuotedStyle
	}
	if n.Value != ref {
		env.resolved.add(path, ref, n.Value)
	}
}

// resolvedRefs are the references resolved in a file, so that an error
// message shows a reference by its text and never by its value, which may
// be a secret.
type resolvedRefs struct{ list []resolvedRef }

type resolvedRef struct {
	path  string // the field's path; "" for a substitution in the file's text
	ref   string // the text as written, e.g. {vault://env/X}
	value string
}

func (r *resolvedRefs) add(path, ref, value string) {
	if r != nil && value != "" {
		r.list = append(r.list, resolvedRef{path, ref, value})
	}
}

// scrub replaces, in every message of errs, a resolved value by its
// reference: a quoted value anywhere, and the bare value in an error of the
// reference's field, of a field below it or of one that holds it (a
// plugin's config). Each message is rewritten in one pass, so
// a reference's text is never rewritten again.
func (r *resolvedRefs) scrub(errs []field.Error) {
	if r == nil || len(r.list) == 0 {
		return
	}
	refs := append([]resolvedRef(nil), r.list...)
	sort.SliceStable(refs, func(i, j int) bool { return len(refs[i].value) > len(refs[j].value) })
	for i := range errs {
		e := &errs[i]
		var pairs []string
		for _, rr := range refs {
			pairs = append(pairs, strconv.Quote(rr.value), strconv.Quote(rr.ref))
			if r := field.RedactURL(rr.value); r != rr.value {
				pairs = append(pairs, strconv.Quote(r), strconv.Quote(rr.ref))
			}
		}
		for _, rr := range refs {
			if rr.path == "" || within(e.Path, rr.path) || e.Path != "" && within(rr.path, e.Path) {
				pairs = append(pairs, rr.value, rr.ref)
			}
		}
		e.Message = strings.NewReplacer(pairs...).Replace(e.Message)
	}
}

// within reports whether path is the field at or below the field at top.
func within(path, top string) bool {
	return path == top || strings.HasPrefix(path, top+".") || strings.HasPrefix(path, top+"[")
}

// refEnv is what references resolve against: the environment and the
// file's vaults entities by prefix.
type refEnv struct {
	lookup   LookupEnv
	vaults   map[string]vaultEntity
	resolved *resolvedRefs // where each resolved reference is recorded
}

// vaultEntity is one entry of vaults: a named configuration of a vault
// strategy (name), referenced as {vault://<prefix>/...}.
type vaultEntity struct {
	name   string
	prefix string // the env vault's config.prefix
}

// scanVaults reads the prefix, name and config.prefix of each vaults
// entry, before references are resolved; the parser validates the
// entries.
func scanVaults(doc *yaml.Node) map[string]vaultEntity {
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		return nil
	}
	get := func(m *yaml.Node, key string) *yaml.Node {
		if m.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				return m.Content[i+1]
			}
		}
		return nil
	}
	list := get(doc, "vaults")
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil
	}
	out := map[string]vaultEntity{}
	for _, e := range list.Content {
		p, n := get(e, "prefix"), get(e, "name")
		if p == nil || n == nil || p.Kind != yaml.ScalarNode || n.Kind != yaml.ScalarNode {
			continue
		}
		v := vaultEntity{name: n.Value}
		if c := get(e, "config"); c != nil {
			if cp := get(c, "prefix"); cp != nil && cp.Kind == yaml.ScalarNode && cp.Tag != "!!null" {
				v.prefix = cp.Value
			}
		}
		out[p.Value] = v
	}
	return out
}

// deckEnv evaluates the inside of one ${{ }}: env "DECK_X" and the
// conversions decK offers, with decK's messages.
func deckEnv(inner string, env LookupEnv) (string, error) {
	m := deckEnvCall.FindStringSubmatch(inner)
	if m == nil {
		return "", fmt.Errorf("decK substitution %q is not supported: sluice resolves ${{ env \"DECK_NAME\" }}, optionally piped to toInt, toBool or toFloat", "${{ "+inner+" }}")
	}
	name := m[1]
	if !strings.HasPrefix(name, "DECK_") {
		return "", fmt.Errorf("environment variables in the state file must be prefixed with 'DECK_', found: '%s'", name)
	}
	var val string
	ok := false
	if env != nil {
		val, ok = env(name)
	}
	if !ok {
		return "", fmt.Errorf("environment variable '%s' present in state file but not set", name)
	}
	switch m[2] {
	case "toInt":
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			return "", fmt.Errorf("environment variable '%s': toInt: not an integer", name)
		}
		return strconv.Itoa(n), nil
	case "toBool":
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return "", fmt.Errorf("environment variable '%s': toBool: not a boolean", name)
		}
		return strconv.FormatBool(b), nil
	case "toFloat":
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return "", fmt.Errorf("environment variable '%s': toFloat: not a number", name)
		}
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	return val, nil
}

// isVaultRef is Kong's test for a vault reference: a string that starts
// with "{vault://" and ends with "}".
func isVaultRef(s string) bool {
	return len(s) > len("{vault://") && strings.HasPrefix(s, "{vault://") && strings.HasSuffix(s, "}")
}

// vaultEnv resolves a Kong reference to the env vault:
// {vault://env/<resource>[/<json-key>][?prefix=P][#version]} reads the
// environment variable upper(P + resource) with "-" as "_" (with
// "_PREVIOUS" appended for version 2), and with a key takes that string
// field of the variable's JSON object value. Other vaults are an error.
func vaultEnv(ref string, renv refEnv) (string, error) {
	env := renv.lookup
	u, err := url.Parse(ref[1 : len(ref)-1])
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("invalid vault reference %q", ref)
	}
	prefix := ""
	if u.Host != "env" {
		v, ok := renv.vaults[u.Host]
		switch {
		case !ok:
			return "", fmt.Errorf("vault reference to the '%s' vault: sluice resolves only the env vault ({vault://env/NAME}, or a vaults entry of it)", u.Host)
		case v.name != "env":
			return "", fmt.Errorf("vault reference to the '%s' vault ('%s' in vaults): sluice resolves only the env vault", u.Host, v.name)
		}
		prefix = v.prefix
	}
	resource := strings.TrimPrefix(u.Path, "/")
	if resource == "" {
		return "", fmt.Errorf("vault reference %q has an empty path", ref)
	}
	key := ""
	if parts := strings.Split(resource, "/"); len(parts) > 1 && !strings.HasSuffix(resource, "/") {
		resource, key = strings.Join(parts[:len(parts)-1], "/"), parts[len(parts)-1]
	}
	version := 0
	if u.Fragment != "" {
		version, err = strconv.Atoi(u.Fragment)
		if err != nil {
			return "", fmt.Errorf("vault reference %q has an invalid version", ref)
		}
	}
	q := u.Query()
	for k := range q {
		if k != "prefix" {
			return "", fmt.Errorf("vault reference %q: the env vault has no option %q (only prefix)", ref, k)
		}
	}
	if q.Has("prefix") {
		prefix = q.Get("prefix") // the reference's own config wins, as in Kong
	}
	name := strings.ToUpper(strings.ReplaceAll(prefix+resource, "-", "_"))
	if version == 2 {
		name += "_PREVIOUS"
	}
	var val string
	ok := false
	if env != nil {
		val, ok = env(name)
	}
	if !ok {
		return "", fmt.Errorf("vault reference %q: environment variable '%s' is not set", ref, name)
	}
	if key == "" {
		return val, nil
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(val), &obj); err != nil {
		return "", fmt.Errorf("vault reference %q: environment variable '%s' is not a JSON object, so it has no field %q", ref, name, key)
	}
	s, ok := obj[key].(string)
	if !ok {
		return "", fmt.Errorf("vault reference %q: the JSON secret in '%s' has no string field %q", ref, name, key)
	}
	return s, nil
}

// renderText substitutes decK's ${{ }} in the text of data, as decK does
// before parsing a file, for a file that is not YAML until rendered. It
// returns nil when data has no substitution; problems are reported by
// line, the text having no fields yet.
func renderText(data []byte, env LookupEnv, resolved *resolvedRefs) ([]byte, Errors) {
	if !bytes.Contains(data, []byte("${{")) {
		return nil, nil
	}
	var errs Errors
	out := deckTemplate.ReplaceAllFunc(data, func(t []byte) []byte {
		inner := deckTemplate.FindSubmatch(t)[1]
		v, err := deckEnv(string(inner), env)
		if err != nil {
			at := bytes.Index(data, t)
			errs = append(errs, field.Error{Line: bytes.Count(data[:at], []byte("\n")) + 1, Message: err.Error()})
		}
		resolved.add("", string(t), v)
		return []byte(v)
	})
	return out, errs
}

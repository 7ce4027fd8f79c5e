package admin

import (
	"bytes"

	"go.yaml.in/yaml/v3"
)

// Redacted replaces a secret in an admin answer.
const Redacted = "[redacted]"

// secretFields are the fields whose values are secrets wherever they
// appear: credentials' secrets and passwords, Redis passwords in plugin
// configs, cloud credentials.
var secretFields = map[string]bool{
	"password":                 true,
	"sentinel_password":        true,
	"secret":                   true,
	"client_secret":            true,
	"aws_secret_access_key":    true,
	"azure_client_secret":      true,
	"gcp_service_account_json": true,
}

// keyIsSecret are the lists whose elements' "key" is a secret: key-auth
// credentials and certificates' private keys.
var keyIsSecret = map[string]bool{
	"keyauth_credentials": true,
	"certificates":        true,
}

// redactConfig returns the declarative configuration data (YAML or JSON)
// as YAML with every secret replaced by Redacted; comments and order are
// kept.
func redactConfig(data []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	redactNode(&doc, "")
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// redactNode walks n; list is the name of the sequence n is an element of.
func redactNode(n *yaml.Node, list string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			redactNode(c, "")
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			redactNode(c, list)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			if secretFields[k] || (k == "key" || k == "key_alt") && keyIsSecret[list] {
				if v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
					*v = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted}
				} else if v.Kind != yaml.ScalarNode {
					*v = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted}
				}
				continue
			}
			redactNode(v, k)
		}
	}
}

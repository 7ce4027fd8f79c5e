package admin

import (
	"bytes"

	"go.yaml.in/yaml/v3"

	"github.com/seed-008287da/sluice/policy/field"
)

// Redacted replaces a secret in an admin answer.
const Redacted = "[redacted]"

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
			if field.IsSecret(list, k) {
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

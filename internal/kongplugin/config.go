package kongplugin

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/seed-008287da/sluice/policy/field"
)

// The config structs below are what go-pdk turns into the Kong-side schema
// of each plugin (printed by -dump) and what it decodes Kong's config JSON
// into. go-pdk's reflection understands only plain types, so every field
// is a pointer to string, bool, int or float64, a slice or a struct
// pointer, and every json tag is the bare field name: the tag text is the
// schema field name, and int64 or interface{} fields would silently drop
// out of the schema (Kong would then reject configs that use them).
//
// Kong only type-checks an external plugin's config; defaults, enums and
// cross-field checks are applied in Go by the policy packages. Kong sends
// every unset field as null, which decodes to a nil pointer; canonicalJSON
// drops those so the policy parser applies its defaults.

// RateLimitingConfig is the config of the sluice-rate-limiting plugin: the
// rate-limiting-advanced schema (Kong 3.13 field list, see
// docs/kong-compatibility.md) plus two sluice extensions, SharedKey and the
// consumer group sources.
type RateLimitingConfig struct {
	Limit                 []float64       `json:"limit"`
	WindowSize            []float64       `json:"window_size"`
	WindowType            *string         `json:"window_type"`
	Identifier            *string         `json:"identifier"`
	CompoundIdentifier    []string        `json:"compound_identifier"`
	CounterKey            *string         `json:"counter_key"`
	HeaderName            *string         `json:"header_name"`
	Path                  *string         `json:"path"`
	Namespace             *string         `json:"namespace"`
	Strategy              *string         `json:"strategy"`
	SyncRate              *float64        `json:"sync_rate"`
	DictionaryName        *string         `json:"dictionary_name"`
	LockDictionaryName    *string         `json:"lock_dictionary_name"`
	HideClientHeaders     *bool           `json:"hide_client_headers"`
	RetryAfterJitterMax   *float64        `json:"retry_after_jitter_max"`
	ErrorCode             *float64        `json:"error_code"`
	ErrorMessage          *string         `json:"error_message"`
	DisablePenalty        *bool           `json:"disable_penalty"`
	EnforceConsumerGroups *bool           `json:"enforce_consumer_groups"`
	ConsumerGroups        []string        `json:"consumer_groups"`
	Throttling            *ThrottlingConf `json:"throttling"`
	Redis                 *RedisConf      `json:"redis"`

	// SharedKey (sluice extension) names the kong.ctx.shared entry that
	// holds a precomputed counter key, such as the composite key the
	// sluice-dimensions plugin writes under "sluice_key". When set and the
	// entry is a non-empty string, it replaces the identifier; when the
	// entry is absent the configured identifier is used. Null disables the
	// lookup (and its PDK round trip).
	SharedKey *string `json:"shared_key"`
	// GroupSource (sluice extension) says where the consumer's group names
	// come from, since go-pdk has no consumer-group API: "consumer_tags"
	// (default; tags of the form "group:<name>" on the consumer entity),
	// "shared" (a string array or comma-separated string in kong.ctx.shared
	// under GroupSharedKey, default "sluice_groups", as the sluice-dimensions
	// plugin writes it) or "header" (a comma-separated request header named
	// by GroupHeader, set by an auth plugin upstream of this one). Groups
	// are read only when the config uses them (enforce_consumer_groups or
	// the consumer-group identifier).
	GroupSource    *string `json:"group_source"`
	GroupSharedKey *string `json:"group_shared_key"`
	GroupHeader    *string `json:"group_header"`
	// ScopeGroup (sluice extension) is the consumer group this instance
	// stands for, replacing Kong Enterprise's consumer_group scoping, which
	// OSS Kong lacks: the consumer-group identifier counts all consumers of
	// this group under one key, and requests whose consumer is not in it
	// fall back to the IP, as in Kong.
	ScopeGroup *string `json:"scope_group"`

	// Sluice holds sluice's engine extensions (policy.Extensions).
	Sluice *SluiceConf `json:"sluice"`

	p    *Process
	raw  []byte
	comp lazy[*rlaCompiled]
}

// ThrottlingConf is rate-limiting-advanced's throttling record.
type ThrottlingConf struct {
	Enabled    *bool    `json:"enabled"`
	Interval   *float64 `json:"interval"`
	RetryTimes *float64 `json:"retry_times"`
	QueueLimit *float64 `json:"queue_limit"`
}

// RedisConf is Kong's shared Redis record (config.redis).
type RedisConf struct {
	Host                   *string        `json:"host"`
	Port                   *int           `json:"port"`
	Database               *int           `json:"database"`
	Username               *string        `json:"username"`
	Password               *string        `json:"password"`
	SSL                    *bool          `json:"ssl"`
	SSLVerify              *bool          `json:"ssl_verify"`
	ServerName             *string        `json:"server_name"`
	Timeout                *int           `json:"timeout"`
	ConnectTimeout         *int           `json:"connect_timeout"`
	SendTimeout            *int           `json:"send_timeout"`
	ReadTimeout            *int           `json:"read_timeout"`
	KeepalivePoolSize      *int           `json:"keepalive_pool_size"`
	KeepaliveBacklog       *int           `json:"keepalive_backlog"`
	SentinelMaster         *string        `json:"sentinel_master"`
	SentinelRole           *string        `json:"sentinel_role"`
	SentinelNodes          []SentinelNode `json:"sentinel_nodes"`
	SentinelUsername       *string        `json:"sentinel_username"`
	SentinelPassword       *string        `json:"sentinel_password"`
	SentinelAddresses      []string       `json:"sentinel_addresses"`
	ClusterNodes           []ClusterNode  `json:"cluster_nodes"`
	ClusterAddresses       []string       `json:"cluster_addresses"`
	ClusterMaxRedirections *int           `json:"cluster_max_redirections"`
	ConnectionIsProxied    *bool          `json:"connection_is_proxied"`
	RedisProxyType         *string        `json:"redis_proxy_type"`
	CloudAuthentication    *CloudAuthConf `json:"cloud_authentication"`
}

// SentinelNode is one entry of redis.sentinel_nodes.
type SentinelNode struct {
	Host *string `json:"host"`
	Port *int    `json:"port"`
}

// ClusterNode is one entry of redis.cluster_nodes.
type ClusterNode struct {
	IP   *string `json:"ip"`
	Port *int    `json:"port"`
}

// CloudAuthConf is redis.cloud_authentication (Kong 3.13+).
type CloudAuthConf struct {
	AuthProvider          *string `json:"auth_provider"`
	AWSCacheName          *string `json:"aws_cache_name"`
	AWSRegion             *string `json:"aws_region"`
	AWSIsServerless       *bool   `json:"aws_is_serverless"`
	AWSAccessKeyID        *string `json:"aws_access_key_id"`
	AWSSecretAccessKey    *string `json:"aws_secret_access_key"`
	AWSAssumeRoleARN      *string `json:"aws_assume_role_arn"`
	AWSRoleSessionName    *string `json:"aws_role_session_name"`
	AzureClientID         *string `json:"azure_client_id"`
	AzureClientSecret     *string `json:"azure_client_secret"`
	AzureTenantID         *string `json:"azure_tenant_id"`
	GCPServiceAccountJSON *string `json:"gcp_service_account_json"`
}

// kongOnlyKeys are keys Kong adds to every config it sends that change
// with each instance; they are left out of the canonical form so that the
// instances of one config share a cache entry.
var kongOnlyKeys = []string{"__seq__", "__key__"}

// canonicalJSON re-encodes a config object with null members removed at
// every depth (Kong sends unset fields as null; the policy parsers apply
// their defaults only to absent fields) and the top-level members named in
// drop removed, and returns it with its SHA-256, the key of the
// compiled-config cache. Object members come out sorted, so equal configs
// give equal bytes.
func canonicalJSON(raw []byte, drop ...string) ([]byte, [32]byte, error) {
	var tree any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return nil, [32]byte{}, fmt.Errorf("kongplugin: decoding config: %w", err)
	}
	m, ok := tree.(map[string]any)
	if !ok {
		return nil, [32]byte{}, fmt.Errorf("kongplugin: config: %s", field.Expected("config", field.Object, tree))
	}
	for _, k := range drop {
		delete(m, k)
	}
	for _, k := range kongOnlyKeys {
		delete(m, k)
	}
	out, err := json.Marshal(pruneNulls(m))
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("kongplugin: encoding config: %w", err)
	}
	return out, sha256.Sum256(out), nil
}

// rawOrMarshal returns the JSON Kong sent for a config, or, for a config
// built in Go, its encoding.
func rawOrMarshal(raw []byte, v any) ([]byte, error) {
	if raw != nil {
		return raw, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("kongplugin: encoding config: %w", err)
	}
	return b, nil
}

func pruneNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			t[k] = pruneNulls(e)
		}
	case []any:
		for i, e := range t {
			t[i] = pruneNulls(e)
		}
	}
	return v
}

package policy

import (
	"net"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/policy/field"
)

// RedisConfig is Kong's shared Redis record (config.redis) with its
// defaults. Nullable fields are pointers; nil means null. Field meanings
// follow Kong; timeouts are in milliseconds.
type RedisConfig struct {
	Host                   *string       `json:"host"`
	Port                   *int64        `json:"port"`
	Database               int64         `json:"database"`
	Username               *string       `json:"username"`
	Password               *string       `json:"password"`
	SSL                    bool          `json:"ssl"`
	SSLVerify              bool          `json:"ssl_verify"`
	ServerName             *string       `json:"server_name"`
	ConnectTimeout         *int64        `json:"connect_timeout"`
	SendTimeout            *int64        `json:"send_timeout"`
	ReadTimeout            *int64        `json:"read_timeout"`
	KeepalivePoolSize      int64         `json:"keepalive_pool_size"`
	KeepaliveBacklog       *int64        `json:"keepalive_backlog"`
	SentinelMaster         *string       `json:"sentinel_master"`
	SentinelRole           *string       `json:"sentinel_role"`
	SentinelNodes          []HostPort    `json:"sentinel_nodes"`
	SentinelUsername       *string       `json:"sentinel_username"`
	SentinelPassword       *string       `json:"sentinel_password"`
	ClusterNodes           []ClusterNode `json:"cluster_nodes"`
	ClusterMaxRedirections int64         `json:"cluster_max_redirections"`
	ConnectionIsProxied    bool          `json:"connection_is_proxied"`
	RedisProxyType         *string       `json:"redis_proxy_type"`
	CloudAuthentication    *CloudAuth    `json:"cloud_authentication"`
}

// HostPort is one Sentinel node.
type HostPort struct {
	Host string `json:"host"`
	Port int64  `json:"port"`
}

// Addr returns "host:port".
func (h HostPort) Addr() string { return net.JoinHostPort(h.Host, strconv.FormatInt(h.Port, 10)) }

// ClusterNode is one Redis Cluster seed node; Kong names its address "ip".
type ClusterNode struct {
	IP   string `json:"ip"`
	Port int64  `json:"port"`
}

// Addr returns "ip:port".
func (n ClusterNode) Addr() string { return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)) }

func toClusterNodes(hs []HostPort) []ClusterNode {
	if hs == nil {
		return nil
	}
	out := make([]ClusterNode, len(hs))
	for i, h := range hs {
		out[i] = ClusterNode{IP: h.Host, Port: h.Port}
	}
	return out
}

func fromClusterNodes(ns []ClusterNode) []HostPort {
	if ns == nil {
		return nil
	}
	out := make([]HostPort, len(ns))
	for i, n := range ns {
		out[i] = HostPort{Host: n.IP, Port: n.Port}
	}
	return out
}

// CloudAuth is Kong's cloud_authentication record (3.13+): the Redis
// password becomes a short-lived token for the user in username. sluice
// implements auth_provider "aws" (ElastiCache IAM), "gcp" (Memorystore)
// and "azure" (Azure Managed Redis, Entra ID). See docs/redis.md.
type CloudAuth struct {
	AuthProvider          *string `json:"auth_provider"`
	AWSCacheName          *string `json:"aws_cache_name"`
	AWSRegion             *string `json:"aws_region"`
	AWSIsServerless       bool    `json:"aws_is_serverless"`
	AWSAccessKeyID        *string `json:"aws_access_key_id"`
	AWSSecretAccessKey    *string `json:"aws_secret_access_key"`
	AWSAssumeRoleARN      *string `json:"aws_assume_role_arn"`
	AWSRoleSessionName    *string `json:"aws_role_session_name"`
	AzureClientID         *string `json:"azure_client_id"`
	AzureClientSecret     *string `json:"azure_client_secret"`
	AzureTenantID         *string `json:"azure_tenant_id"`
	GCPServiceAccountJSON *string `json:"gcp_service_account_json"`
}

const (
	maxTimeout = 1<<31 - 2
	maxPort    = 65535
)

func ptr[T any](v T) *T { return &v }

// defaultRedis returns Kong 3.10+'s defaults for the RLA Redis record.
func defaultRedis() RedisConfig {
	return RedisConfig{
		Host:                   ptr("127.0.0.1"),
		Port:                   ptr(int64(6379)),
		ConnectTimeout:         ptr(int64(2000)),
		SendTimeout:            ptr(int64(2000)),
		ReadTimeout:            ptr(int64(2000)),
		KeepalivePoolSize:      256,
		ClusterMaxRedirections: 5,
	}
}

// parseRedis reads config.redis into r (pre-filled with defaults) and runs
// the record's own checks.
func parseRedis(f *fields, r *RedisConfig) {
	f.host("host", &r.Host)
	f.optInt("port", &r.Port, 0, maxPort)
	f.reqInt("database", &r.Database, -1<<31, 1<<31-1)
	f.secret("username", &r.Username)
	f.secret("password", &r.Password)
	f.reqBool("ssl", &r.SSL)
	f.reqBool("ssl_verify", &r.SSLVerify)
	f.optString("server_name", &r.ServerName)

	// The deprecated timeout writes its value into all three timeouts.
	var timeout *int64
	f.optInt("timeout", &timeout, 0, maxTimeout)
	f.optInt("connect_timeout", &r.ConnectTimeout, 0, maxTimeout)
	f.optInt("send_timeout", &r.SendTimeout, 0, maxTimeout)
	f.optInt("read_timeout", &r.ReadTimeout, 0, maxTimeout)
	if timeout != nil {
		r.ConnectTimeout, r.SendTimeout, r.ReadTimeout = ptr(*timeout), ptr(*timeout), ptr(*timeout)
	}
	f.reqInt("keepalive_pool_size", &r.KeepalivePoolSize, 1, maxTimeout)
	f.optInt("keepalive_backlog", &r.KeepaliveBacklog, 0, maxTimeout)
	f.optString("sentinel_master", &r.SentinelMaster)
	f.enum("sentinel_role", &r.SentinelRole, true, "master", "slave", "any")
	r.SentinelNodes = f.nodes("sentinel_nodes", "host", r.SentinelNodes)
	f.secret("sentinel_username", &r.SentinelUsername)
	f.secret("sentinel_password", &r.SentinelPassword)
	r.SentinelNodes = f.addresses("sentinel_addresses", "sentinel_nodes", r.SentinelNodes)
	cluster := f.nodes("cluster_nodes", "ip", fromClusterNodes(r.ClusterNodes))
	r.ClusterNodes = toClusterNodes(f.addresses("cluster_addresses", "cluster_nodes", cluster))
	f.reqInt("cluster_max_redirections", &r.ClusterMaxRedirections, -1<<31, 1<<31-1)
	f.reqBool("connection_is_proxied", &r.ConnectionIsProxied)
	f.enum("redis_proxy_type", &r.RedisProxyType, true, "envoy_v1.31")
	if sub, k := f.sub("cloud_authentication"); sub != nil {
		r.CloudAuthentication = parseCloudAuth(sub)
	} else if k == kindNull {
		r.CloudAuthentication = nil
	}
	f.done()
	checkCloudAuthUser(f, r.CloudAuthentication, r.Username)

	// Record checks, with Kong's generic messages.
	if (r.Host == nil) != (r.Port == nil) {
		f.d.fail(f.path, "all or none of these fields must be set: 'host', 'port'")
	}
	if (r.SentinelMaster == nil) != (r.SentinelRole == nil) || (r.SentinelMaster == nil) != (r.SentinelNodes == nil) {
		f.d.fail(f.path, "all or none of these fields must be set: 'sentinel_master', 'sentinel_role', 'sentinel_nodes'")
	}
	if (r.ConnectTimeout == nil) != (r.SendTimeout == nil) || (r.ConnectTimeout == nil) != (r.ReadTimeout == nil) {
		f.d.fail(f.path, "all or none of these fields must be set: 'connect_timeout', 'send_timeout', 'read_timeout'")
	}
	if r.ConnectionIsProxied {
		if r.Host == nil {
			f.d.fail(f.at("host"), "required field missing")
		}
		if r.Database != 0 {
			f.d.fail(f.at("database"), "database must be '0' or 'null' when 'connection_is_proxied' is 'true'.")
		}
		if r.ClusterNodes != nil {
			f.d.fail(f.at("connection_is_proxied"), "'connection_is_proxied' can not be 'true' when 'cluster_nodes' is set.")
		}
		if r.SentinelRole != nil {
			f.d.fail(f.at("connection_is_proxied"), "'connection_is_proxied' can not be 'true' when 'sentinel_role' is set.")
		}
	}
}

// nodes reads an array of {hostKey, port} records (at least one).
func (f *fields) nodes(name, hostKey string, cur []HostPort) []HostPort {
	raw, k := f.take(name)
	switch k {
	case kindAbsent:
		return cur
	case kindNull:
		return nil
	}
	items, ok := asArray(raw)
	if !ok {
		f.d.mistyped(f.at(name), field.List, raw)
		return cur
	}
	if len(items) == 0 {
		f.d.fail(f.at(name), "length must be at least 1")
		return cur
	}
	out := make([]HostPort, 0, len(items))
	for i, it := range items {
		p := f.at(name) + "[" + strconv.Itoa(i) + "]"
		n := f.d.record(p, it)
		if n == nil {
			continue
		}
		hp := HostPort{Host: "127.0.0.1", Port: 6379}
		n.reqString(hostKey, &hp.Host, true)
		if hp.Host != "" {
			n.checkHost(hostKey, hp.Host)
		}
		n.reqInt("port", &hp.Port, 0, maxPort)
		n.done()
		out = append(out, hp)
	}
	return out
}

// addresses maps a deprecated ["host:port"] list onto its nodes field.
func (f *fields) addresses(name, newName string, cur []HostPort) []HostPort {
	var list []string
	raw, k := f.take(name)
	if k != kindValue {
		return cur
	}
	f.m[name] = raw
	f.strings(name, &list)
	out := make([]HostPort, 0, len(list))
	bad := false
	for _, a := range list {
		host, port, err := net.SplitHostPort(a)
		p, perr := strconv.ParseInt(port, 10, 64)
		if err != nil || host == "" || perr != nil || p < 0 || p > maxPort {
			// The address is quoted without its user:password@.
			f.d.fail(f.at(name), "Invalid Redis host address: "+field.RedactURL(a))
			bad = true
			continue
		}
		if field.HostProblem(host) != "" {
			f.d.fail(f.at(name), "Invalid Redis host address: "+field.RedactURL(a))
			bad = true
			continue
		}
		out = append(out, HostPort{Host: host, Port: p})
	}
	if bad {
		return cur
	}
	if cur != nil && !sameNodes(cur, out) {
		f.d.fail(f.at(name), "both deprecated and new field are used but their values mismatch: "+name+" = ["+strings.Join(list, ", ")+"] vs "+newName)
		return cur
	}
	return out
}

func sameNodes(a, b []HostPort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func parseCloudAuth(f *fields) *CloudAuth {
	c := &CloudAuth{AWSIsServerless: true}
	f.enum("auth_provider", &c.AuthProvider, true, "aws", "azure", "gcp")
	f.optString("aws_cache_name", &c.AWSCacheName)
	f.optString("aws_region", &c.AWSRegion)
	f.reqBool("aws_is_serverless", &c.AWSIsServerless)
	f.secret("aws_access_key_id", &c.AWSAccessKeyID)
	f.secret("aws_secret_access_key", &c.AWSSecretAccessKey)
	f.optString("aws_assume_role_arn", &c.AWSAssumeRoleARN)
	f.optString("aws_role_session_name", &c.AWSRoleSessionName)
	f.secret("azure_client_id", &c.AzureClientID)
	f.secret("azure_client_secret", &c.AzureClientSecret)
	f.optString("azure_tenant_id", &c.AzureTenantID)
	f.secret("gcp_service_account_json", &c.GCPServiceAccountJSON)
	f.done()
	switch deref(c.AuthProvider) {
	case "aws":
		if c.AWSCacheName == nil {
			f.d.fail(f.at("aws_cache_name"), "required field missing (with auth_provider 'aws')")
		}
		if c.AWSRegion == nil {
			f.d.fail(f.at("aws_region"), "required field missing (with auth_provider 'aws')")
		}
		if (c.AWSAccessKeyID == nil) != (c.AWSSecretAccessKey == nil) {
			f.d.fail(f.path, "all or none of these fields must be set: 'aws_access_key_id', 'aws_secret_access_key'")
		}
	case "gcp":
		if c.GCPServiceAccountJSON == nil {
			f.d.fail(f.at("gcp_service_account_json"), "required field missing (with auth_provider 'gcp')")
		}
	case "azure":
		for _, v := range []struct {
			name string
			p    *string
		}{{"azure_client_id", c.AzureClientID}, {"azure_client_secret", c.AzureClientSecret}, {"azure_tenant_id", c.AzureTenantID}} {
			if v.p == nil {
				f.d.fail(f.at(v.name), "required field missing (with auth_provider 'azure')")
			}
		}
	}
	return c
}

// checkCloudAuthUser reports a missing username: AWS and Azure tokens are
// issued for a named user (Azure: the principal's object id).
func checkCloudAuthUser(f *fields, c *CloudAuth, username *string) {
	if p := deref(c.authProvider()); (p == "aws" || p == "azure") && username == nil {
		f.d.fail(f.at("username"), "required field missing (with cloud_authentication.auth_provider '"+p+"')")
	}
}

func (c *CloudAuth) authProvider() *string {
	if c == nil {
		return nil
	}
	return c.AuthProvider
}

// host reads a nullable string that must be a host (an IP address or a
// host name, without a port), as Kong's typedefs.host.
func (f *fields) host(name string, dst **string) {
	before := *dst
	f.optString(name, dst)
	if *dst != nil && *dst != before { // set here, not kept from a default or another field
		f.checkHost(name, **dst)
	}
}

// checkHost records why v, the value of the field name, is not a host;
// the error never quotes v.
func (f *fields) checkHost(name, v string) {
	if msg := field.HostProblem(v); msg != "" {
		f.d.fail(f.at(name), msg)
	}
}

// secret reads a string field Kong marks referenceable. A value that is
// still a secret reference ("{vault://env/redis-password}") was not
// resolved by Kong, and sending it as a password would fail every
// connection and leave each node counting alone: it is an error.
func (f *fields) secret(name string, dst **string) {
	f.optString(name, dst)
	if v := *dst; v != nil && strings.HasPrefix(*v, "{vault://") && strings.HasSuffix(*v, "}") {
		f.d.fail(f.at(name), "unresolved secret reference: sluice does not resolve Kong vault references, give the value itself")
		*dst = nil
	}
}

// ParseRedis reads Kong's config.redis record from raw JSON over Kong's
// defaults, with the checks rate-limiting-advanced applies to it: the one
// mapping of Kong's Redis settings for every plugin. Absent fields keep
// their defaults; errors name fields under "config.redis" and come as a
// *ValidationError.
func ParseRedis(raw []byte) (*RedisConfig, error) {
	d := &decoder{}
	r := defaultRedis()
	if f := d.record(pathConfig+".redis", raw); f != nil {
		parseRedis(f, &r)
	}
	if len(d.errs) > 0 {
		return nil, &ValidationError{Errors: d.errs}
	}
	return &r, nil
}

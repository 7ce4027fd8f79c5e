package policy

import (
	"strconv"
	"time"

	"github.com/seed-008287da/sluice/policy/field"
)

// BasicConfig is the config object of Kong's OSS rate-limiting plugin,
// field for field, after Kong's defaults, with the deprecated flat redis_*
// fields mapped onto Redis. Nullable fields are pointers; nil is null.
type BasicConfig struct {
	// Second ... Year are the limits per calendar period (UTC); nil means
	// the period is not limited. At least one is set.
	Second *int64 `json:"second"`
	Minute *int64 `json:"minute"`
	Hour   *int64 `json:"hour"`
	Day    *int64 `json:"day"`
	Month  *int64 `json:"month"`
	Year   *int64 `json:"year"`
	// LimitBy is the identifier; "consumer" by default.
	LimitBy    Identifier `json:"limit_by"`
	HeaderName *string    `json:"header_name"`
	Path       *string    `json:"path"`
	// Policy is the store: "local" (default), "redis" or "cluster"
	// ("cluster" needs Kong's database and is rejected: sluice is DB-less).
	Policy            string `json:"policy"`
	FaultTolerant     bool   `json:"fault_tolerant"`
	HideClientHeaders bool   `json:"hide_client_headers"`
	ErrorCode         int64  `json:"error_code"`
	ErrorMessage      string `json:"error_message"`
	// SyncRate is in seconds: -1 (default) sends every request to the
	// store; a positive value batches Redis updates.
	SyncRate float64          `json:"sync_rate"`
	Redis    BasicRedisConfig `json:"redis"`
	Sluice   Extensions       `json:"sluice"`

	Kong KongKeys `json:"-"`
}

// BasicRedisConfig is the OSS plugin's redis record. Timeout is in
// milliseconds.
type BasicRedisConfig struct {
	Host                *string    `json:"host"`
	Port                *int64     `json:"port"`
	Timeout             *int64     `json:"timeout"`
	Username            *string    `json:"username"`
	Password            *string    `json:"password"`
	Database            int64      `json:"database"`
	SSL                 bool       `json:"ssl"`
	SSLVerify           bool       `json:"ssl_verify"`
	ServerName          *string    `json:"server_name"`
	CloudAuthentication *CloudAuth `json:"cloud_authentication"`
}

// redisConfig maps the OSS record onto the shared Redis record.
func (b *BasicRedisConfig) redisConfig() RedisConfig {
	r := RedisConfig{
		Host: b.Host, Port: b.Port, Database: b.Database, Username: b.Username, Password: b.Password,
		SSL: b.SSL, SSLVerify: b.SSLVerify, ServerName: b.ServerName, CloudAuthentication: b.CloudAuthentication,
		ConnectTimeout: b.Timeout, SendTimeout: b.Timeout, ReadTimeout: b.Timeout,
		KeepalivePoolSize: 256, ClusterMaxRedirections: 5,
	}
	return r
}

// period is one configured OSS period.
type period struct {
	name  string // lower case, as in the config
	title string // as in the OSS header names
	limit int64
	len   time.Duration // window length used for the reset value
}

// periods returns the configured periods from second to year.
func (c *BasicConfig) periods() []period {
	all := []struct {
		name, title string
		v           *int64
		len         time.Duration
	}{
		{"second", "Second", c.Second, time.Second},
		{"minute", "Minute", c.Minute, time.Minute},
		{"hour", "Hour", c.Hour, time.Hour},
		{"day", "Day", c.Day, 24 * time.Hour},
		{"month", "Month", c.Month, 30 * 24 * time.Hour},
		{"year", "Year", c.Year, 365 * 24 * time.Hour},
	}
	var ps []period
	for _, p := range all {
		if p.v != nil {
			ps = append(ps, period{name: p.name, title: p.title, limit: *p.v, len: p.len})
		}
	}
	return ps
}

func defaultBasic() BasicConfig {
	return BasicConfig{
		LimitBy:       ByConsumer,
		Policy:        StrategyLocal,
		FaultTolerant: true,
		ErrorCode:     DefaultErrorCode,
		ErrorMessage:  DefaultErrorMessage,
		SyncRate:      -1,
		Redis: BasicRedisConfig{
			Port:    ptr(int64(6379)),
			Timeout: ptr(int64(2000)),
		},
	}
}

// ParseBasic reads the config object of an OSS rate-limiting plugin from
// JSON, strictly, with Kong's defaults (see ParseAdvanced for the keys Kong
// adds, which are accepted). The deprecated flat fields redis_host,
// redis_port, redis_password, redis_username, redis_ssl, redis_ssl_verify,
// redis_server_name, redis_timeout and redis_database are mapped onto
// Redis. On failure it returns a *ValidationError listing every problem.
func ParseBasic(raw []byte) (*BasicConfig, error) {
	d := &decoder{}
	cfg := defaultBasic()
	f := parseRoot(d, raw)
	if f == nil {
		return nil, &ValidationError{Errors: d.errs}
	}
	cfg.Kong = readKongKeys(f)
	for _, p := range []struct {
		name string
		dst  **int64
	}{
		{"second", &cfg.Second}, {"minute", &cfg.Minute}, {"hour", &cfg.Hour},
		{"day", &cfg.Day}, {"month", &cfg.Month}, {"year", &cfg.Year},
	} {
		f.periodLimit(p.name, p.dst)
	}
	limitBy := []string{"consumer", "credential", "ip", "service", "header", "path", "consumer-group", "dimension"}
	s := string(cfg.LimitBy)
	f.enumString("limit_by", &s, limitBy...)
	cfg.LimitBy = Identifier(s)
	f.optChecked("header_name", &cfg.HeaderName, checkHeaderName)
	f.optChecked("path", &cfg.Path, checkURLPath)
	f.enumString("policy", &cfg.Policy, StrategyLocal, StrategyCluster, StrategyRedis)
	f.reqBool("fault_tolerant", &cfg.FaultTolerant)
	f.reqBool("hide_client_headers", &cfg.HideClientHeaders)
	f.errorCode(&cfg.ErrorCode)
	f.reqString("error_message", &cfg.ErrorMessage, false)
	f.reqNumber("sync_rate", &cfg.SyncRate)
	if r, k := f.sub("redis"); r != nil {
		parseBasicRedis(r, &cfg.Redis)
	} else if k == kindNull {
		d.fail(f.at("redis"), msgRequired)
	}
	// Deprecated flat fields (removal planned for Kong 4.0).
	f.host("redis_host", &cfg.Redis.Host)
	f.optInt("redis_port", &cfg.Redis.Port, 0, maxPort)
	f.secret("redis_password", &cfg.Redis.Password)
	f.secret("redis_username", &cfg.Redis.Username)
	f.reqBool("redis_ssl", &cfg.Redis.SSL)
	f.reqBool("redis_ssl_verify", &cfg.Redis.SSLVerify)
	f.optString("redis_server_name", &cfg.Redis.ServerName)
	f.optInt("redis_timeout", &cfg.Redis.Timeout, 0, maxTimeout)
	f.reqInt("redis_database", &cfg.Redis.Database, -1<<31, 1<<31-1)
	if e, _ := f.sub("sluice"); e != nil {
		parseExtensions(e, &cfg.Sluice)
		if cfg.Sluice.RedisLayout == "kong" {
			e.d.fail(e.at("redis_layout"), "\"kong\" applies to rate-limiting-advanced only: rate-limiting's Redis counters "+
				"use sluice's layout, not shared with Kong nodes (docs/kong-compatibility.md)")
		}
	}
	f.done()
	validateBasic(d, &cfg)
	if len(d.errs) > 0 {
		return nil, &ValidationError{Errors: d.errs}
	}
	return &cfg, nil
}

// periodLimit reads a nullable number > 0. Kong's type is number; sluice
// counts whole requests and rejects fractions.
func (f *fields) periodLimit(name string, dst **int64) {
	raw, k := f.take(name)
	switch k {
	case kindNull:
		*dst = nil
	case kindValue:
		v, ok := asNumber(raw)
		switch {
		case !ok:
			f.d.mistyped(f.at(name), field.Number, raw)
		case v <= 0:
			f.d.fail(f.at(name), msgGreaterZero)
		case !isWhole(v):
			f.d.fail(f.at(name), "value must be a whole number")
		default:
			n := int64(v)
			*dst = &n
		}
	}
}

// parseBasicRedis reads the OSS plugin's redis record.
func parseBasicRedis(f *fields, r *BasicRedisConfig) {
	f.host("host", &r.Host)
	f.optInt("port", &r.Port, 0, maxPort)
	f.optInt("timeout", &r.Timeout, 0, maxTimeout)
	f.secret("username", &r.Username)
	f.secret("password", &r.Password)
	f.reqInt("database", &r.Database, -1<<31, 1<<31-1)
	f.reqBool("ssl", &r.SSL)
	f.reqBool("ssl_verify", &r.SSLVerify)
	f.optString("server_name", &r.ServerName)
	if sub, k := f.sub("cloud_authentication"); sub != nil {
		r.CloudAuthentication = parseCloudAuth(sub)
	} else if k == kindNull {
		r.CloudAuthentication = nil
	}
	f.done()
	checkCloudAuthUser(f, r.CloudAuthentication, r.Username)
}

func validateBasic(d *decoder, c *BasicConfig) {
	const p = pathConfig + "."
	ps := c.periods()
	if len(ps) == 0 {
		d.fail(pathConfig, "at least one of these fields must be non-empty: 'config.second', 'config.minute', 'config.hour', 'config.day', 'config.month', 'config.year'")
	}
	// A longer period may not have a smaller limit than a shorter one.
	for i := range ps {
		for j := range i {
			if ps[i].limit < ps[j].limit {
				d.fail(p+ps[i].name, "The limit for "+ps[i].name+"("+oneDecimal(ps[i].limit)+") cannot be lower than the limit for "+ps[j].name+"("+oneDecimal(ps[j].limit)+")")
			}
		}
	}
	if c.LimitBy == ByHeader && c.HeaderName == nil {
		d.fail(p+"header_name", msgRequired)
	}
	if c.LimitBy == ByPath && c.Path == nil {
		d.fail(p+"path", msgRequired)
	}
	if c.Policy == StrategyRedis {
		if c.Redis.Host == nil {
			d.fail(p+"redis.host", msgRequired)
		}
		if c.Redis.Port == nil {
			d.fail(p+"redis.port", msgRequired)
		}
		if c.Redis.Timeout == nil {
			d.fail(p+"redis.timeout", msgRequired)
		}
	}
	if c.SyncRate != -1 {
		if c.Policy != StrategyRedis {
			d.fail(p+"sync_rate", "sync_rate can only be used with the redis policy")
		} else if c.SyncRate < 0.02 {
			d.fail(p+"sync_rate", "sync_rate must be greater than 0.02, or -1 to disable")
		}
	}
	if c.Policy == StrategyCluster {
		// sluice has no Kong database, like DB-less Kong, which does not
		// offer this policy.
		d.fail(p+"policy", "expected one of: local, redis")
	}
}

// oneDecimal formats n as Lua's "%.1f" would.
func oneDecimal(n int64) string { return strconv.FormatInt(n, 10) + ".0" }

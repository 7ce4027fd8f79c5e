package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"

	"github.com/redis/rueidis"
)

// A Fault is an error of configuration that Redis (or the TLS handshake)
// reports: retrying with the same Config fails the same way, so it is not
// "Redis is down". A store treats it as unavailability (it decides with
// local counters, or returns ErrUnavailable with Options.Strict) and logs it
// once, as an error naming Setting.
type Fault struct {
	// Reason is a short stable word for metrics: "wrongpass", "noauth",
	// "noperm", "unknown_command", "database", "tls_name" or
	// "tls_certificate".
	Reason string
	// Setting is the Config field to check, named as in Kong's
	// config.redis: "password", "username", "host", "database",
	// "server_name" or "ssl_verify"; "cloud_authentication" for a refused token, in the
	// faults a Store or Client.Ping reports with Config.CloudAuth set.
	Setting string
	// Err is the error as Redis or the handshake gave it.
	Err error
}

func (f *Fault) Error() string {
	return "redisstore: " + f.Reason + " (check " + f.Setting + "): " + f.Err.Error()
}

func (f *Fault) Unwrap() error { return f.Err }

// Classify returns the Fault err stands for, or nil when err is not one (a
// Redis that does not answer, a bad reply, nil).
func Classify(err error) *Fault {
	if err == nil {
		return nil
	}
	var f *Fault
	if errors.As(err, &f) {
		return f
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		msg := re.Error()
		switch {
		case strings.HasPrefix(msg, "WRONGPASS"):
			return &Fault{Reason: "wrongpass", Setting: "password", Err: err}
		case strings.HasPrefix(msg, "NOAUTH"):
			return &Fault{Reason: "noauth", Setting: "password", Err: err}
		case strings.HasPrefix(msg, "NOPERM"):
			return &Fault{Reason: "noperm", Setting: "username", Err: err}
		case strings.Contains(msg, "unknown command"):
			return &Fault{Reason: "unknown_command", Setting: "host", Err: err}
		case strings.Contains(msg, "DB index is out of range"):
			return &Fault{Reason: "database", Setting: "database", Err: err}
		}
		return nil
	}
	var hn x509.HostnameError
	if errors.As(err, &hn) {
		return &Fault{Reason: "tls_name", Setting: "server_name", Err: err}
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return &Fault{Reason: "tls_certificate", Setting: "ssl_verify", Err: err}
	}
	return nil
}

// logState logs a change of the store's state once: the switch to local
// counters, a change of its reason while there (Redis down, then up with a
// wrong password), and the return of Redis. A probe that fails for the
// reason already logged is logged at debug level only, so an outage logs
// two lines however often the store probes. Called with s.br.mu held.
func (s *Store) logState(from, to State, err error) {
	ns := s.opts.Namespace
	switch to {
	case StateProbing:
		s.logger.Debug("redisstore: probing redis", "namespace", ns)
	case StateFallback:
		f := Classify(err)
		reason := "unavailable"
		if f != nil {
			reason = f.Reason
		}
		if reason == s.downReason {
			s.logger.Debug("redisstore: redis still unavailable", "namespace", ns, "reason", reason, "error", err)
			return
		}
		s.downReason = reason
		if f != nil {
			setting := "config.redis." + f.Setting
			if s.opts.SettingName != nil {
				setting = s.opts.SettingName(f.Setting)
			}
			s.logger.Error("redisstore: redis refuses the configuration, deciding with local counters",
				"namespace", ns, "reason", f.Reason, "setting", setting, "error", err)
			return
		}
		s.logger.Warn("redisstore: redis unavailable, deciding with local counters",
			"namespace", ns, "from", from.String(), "error", err)
	case StateConnected:
		if s.downReason == "" {
			return
		}
		s.downReason = ""
		s.logger.Info("redisstore: redis available again, counters resync", "namespace", ns)
	}
}

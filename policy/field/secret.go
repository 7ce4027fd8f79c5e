package field

import "strings"

// secretNames are the fields whose values are secrets wherever they
// appear: credentials' secrets and passwords, Redis passwords in plugin
// configs, cloud credentials.
var secretNames = map[string]bool{
	"password":                 true,
	"sentinel_password":        true,
	"redis_password":           true, // rate-limiting's shorthand for redis.password
	"secret":                   true,
	"client_secret":            true,
	"aws_secret_access_key":    true,
	"azure_client_secret":      true,
	"gcp_service_account_json": true,
}

// keyIsSecretIn are the lists whose elements' "key" (and "key_alt") is a
// secret: key-auth credentials and certificates' private keys.
var keyIsSecretIn = map[string]bool{
	"keyauth_credentials": true,
	"certificates":        true,
}

// IsSecret reports whether the field name, in an element of the list
// named list ("" when none), holds a secret. Admin answers redact such a
// value, and error messages name the field but never quote its value.
func IsSecret(list, name string) bool {
	return secretNames[name] || (name == "key" || name == "key_alt") && keyIsSecretIn[list]
}

// IsSecretPath reports whether the field at path (as in
// "keyauth_credentials[0].key" or "plugins[1].config.redis.password")
// holds a secret.
func IsSecretPath(path string) bool {
	name, list := path, ""
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		name, list = path[i+1:], path[:i]
		if j := strings.LastIndexByte(list, '['); j >= 0 && strings.HasSuffix(list, "]") {
			list = list[:j]
		}
		if j := strings.LastIndexAny(list, ".]"); j >= 0 {
			list = list[j+1:]
		}
	}
	return IsSecret(list, name)
}

// RedactURL returns s with the user information of a URL in it
// ("scheme://user:password@host") replaced by xxxxx, so the URL can be
// quoted in an error message; it works on text that does not parse as a
// URL too. Unlike net/url's URL.Redacted it hides the user name as well:
// a Redis URL may carry the password there.
func RedactURL(s string) string {
	rest := s
	prefix := ""
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return s
	}
	return prefix + "xxxxx" + rest[at:]
}

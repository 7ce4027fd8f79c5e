package field

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://user:pass@host/p", "http://xxxxx@host/p"},
		{"redis://:secret@host:6379", "redis://xxxxx@host:6379"},
		{"redis://secret@host:6379", "redis://xxxxx@host:6379"},
		{"http://u:p@bad host/", "http://xxxxx@bad host/"},
		{":secret@host:6379", "xxxxx@host:6379"},
		{"http://host/a@b", "http://host/a@b"},
		{"host:6379", "host:6379"},
		{"not a url", "not a url"},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestIsSecretPath(t *testing.T) {
	for path, want := range map[string]bool{
		"password":                                true,
		"plugins[0].config.redis.password":        true,
		"plugins[0].config.redis_password":        true,
		"consumers[1].keyauth_credentials[0].key": true,
		"certificates[2].key":                     true,
		"consumers[0].jwt_secrets[0].secret":      true,
		"consumers[0].jwt_secrets[0].key":         false,
		"config.key_names[0]":                     false,
		"services[0].url":                         false,
	} {
		if got := IsSecretPath(path); got != want {
			t.Errorf("IsSecretPath(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestJSONHidesSecretNumber: a number where a secret string belongs is
// reported without the number.
func TestJSONHidesSecretNumber(t *testing.T) {
	var v struct {
		Redis struct {
			Password int `json:"password"`
		} `json:"redis"`
		Limit int `json:"limit"`
	}
	for _, decode := range []func(data string) Error{
		func(data string) Error { return Decode("config", []byte(data), &v).(Error) },
		func(data string) Error { return jsonError("config", json.Unmarshal([]byte(data), &v)) },
	} {
		fe := decode(`{"redis":{"password":91827.3645}}`)
		if fe.Path != "config.redis.password" || strings.Contains(fe.Message, "91827.3645") || fe.Message != "expected an integer, got a number" {
			t.Errorf("secret: %v", fe)
		}
		if fe := decode(`{"limit":5.5}`); fe.Message != "expected an integer, got the number 5.5" {
			t.Errorf("not a secret: %v", fe)
		}
	}
}

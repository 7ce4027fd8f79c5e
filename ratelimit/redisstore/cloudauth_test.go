package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/rueidis"

	"github.com/seed-008287da/sluice/internal/testservers"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func awsTestAuth(clock *fakeClock) *CloudAuth {
	return &CloudAuth{
		Provider: "aws", AWSCacheName: "my-cache", AWSRegion: "eu-west-1", AWSServerless: true,
		AWSAccessKeyID: "AKIDEXAMPLE", AWSSecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
		Now: clock.Now,
	}
}

func TestAWSIAMToken(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	ts, err := newTokenSource(awsTestAuth(clock), "alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok, due, err := ts.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tok, "://") || !strings.HasPrefix(tok, "my-cache/?") {
		t.Fatalf("token %q: want my-cache/?... without a scheme", tok)
	}
	q, err := url.ParseQuery(strings.TrimPrefix(tok, "my-cache/?"))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"Action":              "connect",
		"User":                "alice",
		"ResourceType":        "ServerlessCache",
		"X-Amz-Algorithm":     "AWS4-HMAC-SHA256",
		"X-Amz-Credential":    "AKIDEXAMPLE/20260304/eu-west-1/elasticache/aws4_request",
		"X-Amz-Date":          "20260304T050607Z",
		"X-Amz-Expires":       "900",
		"X-Amz-SignedHeaders": "host",
	} {
		if got := q.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if len(q.Get("X-Amz-Signature")) != 64 {
		t.Errorf("X-Amz-Signature = %q, want 64 hex digits", q.Get("X-Amz-Signature"))
	}
	if want := clock.Now().Add(10 * time.Minute); !due.Equal(want) {
		t.Errorf("refresh due %v, want %v", due, want)
	}

	// Reused until it is due, then signed again.
	clock.Add(10*time.Minute - time.Nanosecond)
	if again, _, _ := ts.get(ctx); again != tok {
		t.Errorf("token changed before it was due")
	}
	clock.Add(time.Nanosecond)
	next, _, _ := ts.get(ctx)
	if next == tok || !strings.Contains(next, "X-Amz-Date=20260304T051607Z") {
		t.Errorf("token after 10 minutes = %q, want one signed at 05:16:07", next)
	}

	// Live connections are sent AUTH again when the token is due: rueidis
	// schedules it on the wall clock, so RefreshAfter is the token's
	// remaining reuse time from the wall clock's now.
	clock.Add(3 * time.Minute)
	before := time.Now()
	cred, err := ts.authFn("alice")(rueidis.AuthCredentialsContext{})
	after := time.Now()
	if err != nil || cred.Username != "alice" || cred.Password != next {
		t.Fatalf("credentials = %+v, %v; want alice and the current token", cred, err)
	}
	if cred.RefreshAfter.Before(before.Add(7*time.Minute)) || cred.RefreshAfter.After(after.Add(7*time.Minute)) {
		t.Errorf("RefreshAfter is %v from now, want 7m", cred.RefreshAfter.Sub(before))
	}

	// Not serverless: no ResourceType.
	ca := awsTestAuth(clock)
	ca.AWSServerless = false
	ts, _ = newTokenSource(ca, "alice")
	if tok, _, _ := ts.get(ctx); strings.Contains(tok, "ResourceType") {
		t.Errorf("token for a node-based cache has a ResourceType: %q", tok)
	}
}

func TestCloudAuthConfig(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	for _, tc := range []struct {
		name  string
		edit  func(*CloudAuth)
		user  string
		field string
	}{
		{"azure without a secret", func(c *CloudAuth) { c.Provider, c.AzureClientID, c.AzureTenantID = "azure", "app", "t" }, "oid", "azure_client_secret is required"},
		{"azure without a user", func(c *CloudAuth) {
			c.Provider, c.AzureClientID, c.AzureClientSecret, c.AzureTenantID = "azure", "app", "s", "t"
		}, "", "username (the object id of the Entra principal) is required"},
		{"unknown provider", func(c *CloudAuth) { c.Provider = "ibm" }, "alice", `auth_provider "ibm" is not supported`},
		{"gcp without a key", func(c *CloudAuth) { c.Provider = "gcp" }, "alice", "gcp_service_account_json is required"},
		{"gcp with a bad key", func(c *CloudAuth) { c.Provider, c.GCPServiceAccountJSON = "gcp", "{not json" }, "alice", "gcp_service_account_json is not a service-account key"},
		{"no provider", func(c *CloudAuth) { c.Provider = "" }, "alice", "auth_provider is required"},
		{"no cache", func(c *CloudAuth) { c.AWSCacheName = "" }, "alice", "aws_cache_name is required"},
		{"no region", func(c *CloudAuth) { c.AWSRegion = "" }, "alice", "aws_region is required"},
		{"no user", func(*CloudAuth) {}, "", "username is required"},
		{"half a key", func(c *CloudAuth) { c.AWSSecretAccessKey = "" }, "alice", "aws_access_key_id and aws_secret_access_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := awsTestAuth(clock)
			tc.edit(ca)
			_, err := NewClient(Config{Username: tc.user, CloudAuth: ca})
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("NewClient = %v, want ErrConfig naming %q", err, tc.field)
			}
		})
	}
}

// TestAWSIAMAuth connects to a local redis-server whose ACL user's password
// is the token the provider signs, then rotates the password to the token
// due after the refresh and checks that new connections use it.
func TestAWSIAMAuth(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{})
	clock := &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	ca := awsTestAuth(clock)
	expected, err := newTokenSource(ca, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok1, _, err := expected.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "ACL", "SETUSER", "alice", "on", "resetpass", ">"+tok1, "~*", "&*", "+@all")

	c := dial(t, Config{Host: srv.Host(), Port: srv.Port(), Username: "alice", CloudAuth: ca})
	whoami := func() (string, error) {
		return rcOf(t, c).Do(ctx, rcOf(t, c).B().AclWhoami().Build()).ToString()
	}
	if u, err := whoami(); err != nil || u != "alice" {
		t.Fatalf("ACL WHOAMI = %q, %v; want alice", u, err)
	}

	// Ten minutes on, the token is signed again; only the new one works.
	clock.Add(10 * time.Minute)
	tok2, _, err := expected.get(ctx)
	if err != nil || tok2 == tok1 {
		t.Fatalf("refreshed token: %v (same as before: %v)", err, tok2 == tok1)
	}
	srv.Do(t, "ACL", "SETUSER", "alice", "resetpass", ">"+tok2)
	if n, _ := srv.Do(t, "CLIENT", "KILL", "USER", "alice").(int64); n == 0 {
		t.Fatal("CLIENT KILL USER alice killed no connection")
	}
	// The first command may meet the killed connection; the client then
	// reconnects, authenticating with the refreshed token.
	var u string
	for range 3 {
		if u, err = whoami(); err == nil {
			break
		}
	}
	if err != nil || u != "alice" {
		t.Fatalf("after the rotation: ACL WHOAMI = %q, %v; want alice", u, err)
	}
}

// gcpTokenServer is a local OAuth token endpoint for service-account JWT
// assertions: it checks the assertion's signature with the key's public
// half and its claims, and issues token-1, token-2, ... valid for an hour.
func gcpTokenServer(t *testing.T, key *rsa.PrivateKey, email string) *httptest.Server {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
			http.Error(w, "bad grant", http.StatusBadRequest)
			return
		}
		claims := jwt.MapClaims{}
		_, err := jwt.ParseWithClaims(r.Form.Get("assertion"), claims, func(*jwt.Token) (any, error) { return &key.PublicKey, nil },
			jwt.WithValidMethods([]string{"RS256"}))
		if err != nil || claims["iss"] != email || claims["scope"] != gcpScope || claims["aud"] != "http://"+r.Host+"/token" {
			http.Error(w, fmt.Sprintf("bad assertion: %v %v", err, claims), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		n++
		tok := fmt.Sprintf("token-%d", n)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, tok)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func gcpServiceAccount(t *testing.T, key *rsa.PrivateKey, email, tokenURI string) string {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": email, "client_id": "1", "token_uri": tokenURI,
	})
	return string(b)
}

// TestGCPAuth connects to a local redis-server whose ACL user's password
// is the access token a local token endpoint issued for the service
// account, then checks the token is refreshed 5 minutes before it expires
// and new connections use it.
func TestGCPAuth(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const email = "gw@p.iam.gserviceaccount.com"
	tokens := gcpTokenServer(t, key, email)
	clock := &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	ca := &CloudAuth{Provider: "gcp", GCPServiceAccountJSON: gcpServiceAccount(t, key, email, tokens.URL+"/token"), Now: clock.Now}

	srv := testservers.Redis(t, testservers.RedisOptions{})
	srv.Do(t, "ACL", "SETUSER", "alice", "on", ">token-1", "~*", "&*", "+@all")
	c := dial(t, Config{Host: srv.Host(), Port: srv.Port(), Username: "alice", CloudAuth: ca})
	ctx := context.Background()
	whoami := func() (string, error) {
		return rcOf(t, c).Do(ctx, rcOf(t, c).B().AclWhoami().Build()).ToString()
	}
	if u, err := whoami(); err != nil || u != "alice" {
		t.Fatalf("ACL WHOAMI = %q, %v; want alice", u, err)
	}

	reconnect := func(when string) {
		t.Helper()
		if n, _ := srv.Do(t, "CLIENT", "KILL", "USER", "alice").(int64); n == 0 {
			t.Fatal("CLIENT KILL USER alice killed no connection")
		}
		var u string
		var err error
		for range 3 {
			if u, err = whoami(); err == nil {
				break
			}
		}
		if err != nil || u != "alice" {
			t.Fatalf("%s: ACL WHOAMI = %q, %v; want alice", when, u, err)
		}
	}
	// 54 minutes on, token-1 is still used.
	clock.Add(54 * time.Minute)
	reconnect("at 54 minutes")

	// 55 minutes on (5 before expiry) a new token is fetched; only it works.
	clock.Add(time.Minute)
	srv.Do(t, "ACL", "SETUSER", "alice", "resetpass", ">token-2")
	reconnect("after the refresh")
}

// TestAzureAuth connects to a local redis-server whose ACL user (named by
// the principal's object id) has as password the token a local Entra
// authority issued for the client credentials, and checks the refresh 5
// minutes before expiry.
func TestAzureAuth(t *testing.T) {
	var mu sync.Mutex
	n := 0
	authority := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.URL.Path != "/tenant-1/oauth2/v2.0/token" ||
			r.Form.Get("grant_type") != "client_credentials" || r.Form.Get("client_id") != "app-1" ||
			r.Form.Get("client_secret") != "s3cret" || r.Form.Get("scope") != azureScope {
			http.Error(w, fmt.Sprintf("bad request %s %v", r.URL.Path, r.Form), http.StatusBadRequest)
			return
		}
		mu.Lock()
		n++
		tok := fmt.Sprintf("entra-%d", n)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, tok)
	}))
	t.Cleanup(authority.Close)
	clock := &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	ca := &CloudAuth{Provider: "azure", AzureClientID: "app-1", AzureClientSecret: "s3cret", AzureTenantID: "tenant-1",
		AzureAuthorityHost: authority.URL, Now: clock.Now}
	const oid = "7f1c2d3e-0000-4000-8000-000000000001"

	srv := testservers.Redis(t, testservers.RedisOptions{})
	srv.Do(t, "ACL", "SETUSER", oid, "on", ">entra-1", "~*", "&*", "+@all")
	c := dial(t, Config{Host: srv.Host(), Port: srv.Port(), Username: oid, CloudAuth: ca})
	ctx := context.Background()
	reconnect := func(when string) {
		t.Helper()
		if n, _ := srv.Do(t, "CLIENT", "KILL", "USER", oid).(int64); n == 0 {
			t.Fatalf("%s: CLIENT KILL USER killed no connection", when)
		}
		var u string
		var err error
		for range 3 {
			if u, err = rcOf(t, c).Do(ctx, rcOf(t, c).B().AclWhoami().Build()).ToString(); err == nil {
				break
			}
		}
		if err != nil || u != oid {
			t.Fatalf("%s: ACL WHOAMI = %q, %v; want %s", when, u, err, oid)
		}
	}
	clock.Add(54 * time.Minute)
	reconnect("at 54 minutes")
	clock.Add(time.Minute)
	srv.Do(t, "ACL", "SETUSER", oid, "resetpass", ">entra-2")
	reconnect("after the refresh")
}

package redisstore

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/redis/rueidis"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"golang.org/x/oauth2/google"
)

// CloudAuth authenticates with a managed Redis that takes short-lived
// tokens as passwords (Kong's redis.cloud_authentication). The token
// replaces Config.Password; Config.Username is the user it is issued for.
// A token is reused until 5 minutes of its validity are left; then new
// connections get a new one and live ones are sent AUTH with it.
type CloudAuth struct {
	// Provider is "aws" (ElastiCache IAM authentication), "gcp"
	// (Memorystore IAM authentication) or "azure" (Azure Managed Redis,
	// Entra ID).
	Provider string

	// AWSCacheName is the cache (replication group or serverless cache)
	// the token is for, and AWSRegion its region. AWSServerless marks a
	// serverless cache.
	AWSCacheName  string
	AWSRegion     string
	AWSServerless bool
	// AWSAccessKeyID and AWSSecretAccessKey sign the token; empty means
	// the SDK's default credential chain (environment, shared config,
	// instance or task role).
	AWSAccessKeyID     string
	AWSSecretAccessKey string
	// AWSAssumeRoleARN, when set, signs with that role's credentials,
	// obtained from STS with the credentials above; AWSRoleSessionName
	// names the session ("" means "sluice").
	AWSAssumeRoleARN   string
	AWSRoleSessionName string

	// GCPServiceAccountJSON is a service-account key file; its access
	// tokens (scope cloud-platform, from the file's token_uri) are the
	// passwords.
	GCPServiceAccountJSON string

	// AzureClientID, AzureClientSecret and AzureTenantID are the Entra ID
	// application whose client-credentials tokens (scope
	// https://redis.azure.com/.default) are the passwords; Config.Username
	// is its object (principal) id. AzureAuthorityHost is the Entra
	// endpoint; "" means https://login.microsoftonline.com.
	AzureClientID      string
	AzureClientSecret  string
	AzureTenantID      string
	AzureAuthorityHost string

	// Now is the clock tokens are signed and refreshed by; nil means
	// time.Now.
	Now func() time.Time
}

const (
	// awsTokenLifetime is the validity of an ElastiCache IAM token.
	awsTokenLifetime = 15 * time.Minute
	// tokenFetchTimeout bounds fetching credentials for one token.
	tokenFetchTimeout = 10 * time.Second
)

// tokenSource caches one token and fetches a new one when it is due.
// It is safe for concurrent use.
type tokenSource struct {
	now func() time.Time
	// fetch returns a new token and how long it is valid.
	fetch func(ctx context.Context, now time.Time) (string, time.Duration, error)

	mu    sync.Mutex
	token string
	due   time.Time
}

// reuseFor is how long a token valid for d is used: until 5 minutes of
// validity are left, or half its life for a short-lived one.
func reuseFor(d time.Duration) time.Duration {
	if d >= 2*tokenMargin {
		return d - tokenMargin
	}
	return d / 2
}

// tokenMargin is the validity a token has left when it is replaced.
const tokenMargin = 5 * time.Minute

// get returns the cached token, or a new one once the cached one is due,
// and the time the token is due for refresh.
func (s *tokenSource) get(ctx context.Context) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.token == "" || !now.Before(s.due) {
		tok, valid, err := s.fetch(ctx, now)
		if err != nil {
			return "", time.Time{}, err
		}
		s.token, s.due = tok, now.Add(reuseFor(valid))
	}
	return s.token, s.due, nil
}

// authFn returns the rueidis credentials function of a token source: each
// new connection authenticates with the current token, and rueidis sends
// AUTH again on every live connection when the token is due for refresh.
func (s *tokenSource) authFn(username string) func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
	return func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
		ctx, cancel := context.WithTimeout(context.Background(), tokenFetchTimeout)
		defer cancel()
		tok, due, err := s.get(ctx)
		if err != nil {
			return rueidis.AuthCredentials{}, err
		}
		// rueidis schedules the refresh on the wall clock; the token's
		// age is measured on s.now.
		return rueidis.AuthCredentials{
			Username:     username,
			Password:     tok,
			RefreshAfter: time.Now().Add(max(due.Sub(s.now()), time.Second)),
		}, nil
	}
}

// newTokenSource validates ca and returns its token source.
func newTokenSource(ca *CloudAuth, username string) (*tokenSource, error) {
	now := ca.Now
	if now == nil {
		now = time.Now
	}
	switch ca.Provider {
	case "aws":
		fetch, err := awsTokenFetcher(ca, username)
		if err != nil {
			return nil, err
		}
		return &tokenSource{now: now, fetch: fetch}, nil
	case "gcp":
		fetch, err := gcpTokenFetcher(ca)
		if err != nil {
			return nil, err
		}
		return &tokenSource{now: now, fetch: fetch}, nil
	case "azure":
		fetch, err := azureTokenFetcher(ca, username)
		if err != nil {
			return nil, err
		}
		return &tokenSource{now: now, fetch: fetch}, nil
	case "":
		return nil, fmt.Errorf("%w: cloud_authentication.auth_provider is required", ErrConfig)
	default:
		return nil, fmt.Errorf("%w: cloud_authentication.auth_provider %q is not supported (aws, azure or gcp)", ErrConfig, ca.Provider)
	}
}

func awsTokenFetcher(ca *CloudAuth, username string) (func(context.Context, time.Time) (string, time.Duration, error), error) {
	switch {
	case ca.AWSCacheName == "":
		return nil, fmt.Errorf("%w: cloud_authentication.aws_cache_name is required with auth_provider aws", ErrConfig)
	case ca.AWSRegion == "":
		return nil, fmt.Errorf("%w: cloud_authentication.aws_region is required with auth_provider aws", ErrConfig)
	case username == "":
		return nil, fmt.Errorf("%w: username is required with auth_provider aws (the ElastiCache IAM user)", ErrConfig)
	case (ca.AWSAccessKeyID == "") != (ca.AWSSecretAccessKey == ""):
		return nil, fmt.Errorf("%w: cloud_authentication.aws_access_key_id and aws_secret_access_key must be set together", ErrConfig)
	}
	var (
		creds   aws.CredentialsProvider
		loadErr error
		once    sync.Once
	)
	if ca.AWSAccessKeyID != "" {
		creds = credentials.NewStaticCredentialsProvider(ca.AWSAccessKeyID, ca.AWSSecretAccessKey, "")
	}
	// The default chain and STS are set up on first use, so building a
	// store never waits on the network.
	provider := func(ctx context.Context) (aws.CredentialsProvider, error) {
		once.Do(func() {
			if creds == nil {
				cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(ca.AWSRegion))
				if err != nil {
					loadErr = fmt.Errorf("redisstore: loading AWS credentials: %w", err)
					return
				}
				creds = cfg.Credentials
			}
			if ca.AWSAssumeRoleARN != "" {
				name := ca.AWSRoleSessionName
				if name == "" {
					name = "sluice"
				}
				client := sts.New(sts.Options{Region: ca.AWSRegion, Credentials: creds})
				creds = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(client, ca.AWSAssumeRoleARN,
					func(o *stscreds.AssumeRoleOptions) { o.RoleSessionName = name }))
			}
		})
		return creds, loadErr
	}
	signer := v4.NewSigner()
	return func(ctx context.Context, now time.Time) (string, time.Duration, error) {
		p, err := provider(ctx)
		if err != nil {
			return "", 0, err
		}
		c, err := p.Retrieve(ctx)
		if err != nil {
			return "", 0, fmt.Errorf("redisstore: retrieving AWS credentials: %w", err)
		}
		tok, err := awsIAMToken(ctx, signer, c, ca.AWSCacheName, ca.AWSRegion, username, ca.AWSServerless, now)
		return tok, awsTokenLifetime, err
	}, nil
}

// emptySHA256 is the hex SHA-256 of an empty payload.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// awsIAMToken returns an ElastiCache IAM authentication token: a GET
// "connect" request for user on cache, presigned with SigV4 for service
// elasticache, valid for 15 minutes from now, without its scheme.
func awsIAMToken(ctx context.Context, signer *v4.Signer, c aws.Credentials, cache, region, user string, serverless bool, now time.Time) (string, error) {
	q := url.Values{"Action": {"connect"}, "User": {user}}
	if serverless {
		q.Set("ResourceType", "ServerlessCache")
	}
	q.Set("X-Amz-Expires", fmt.Sprint(int(awsTokenLifetime/time.Second)))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, (&url.URL{Scheme: "http", Host: cache, Path: "/", RawQuery: q.Encode()}).String(), nil)
	if err != nil {
		return "", fmt.Errorf("%w: cloud_authentication.aws_cache_name %q: %v", ErrConfig, cache, err)
	}
	signed, _, err := signer.PresignHTTP(ctx, c, req, emptySHA256, "elasticache", region, now.UTC())
	if err != nil {
		return "", fmt.Errorf("redisstore: signing the ElastiCache IAM token: %w", err)
	}
	return strings.TrimPrefix(signed, "http://"), nil
}

// gcpScope is the OAuth scope Memorystore IAM authentication accepts.
const gcpScope = "https://www.googleapis.com/auth/cloud-platform"

func gcpTokenFetcher(ca *CloudAuth) (func(context.Context, time.Time) (string, time.Duration, error), error) {
	if ca.GCPServiceAccountJSON == "" {
		return nil, fmt.Errorf("%w: cloud_authentication.gcp_service_account_json is required with auth_provider gcp", ErrConfig)
	}
	conf, err := google.JWTConfigFromJSON([]byte(ca.GCPServiceAccountJSON), gcpScope)
	if err != nil {
		// The error never quotes the key.
		return nil, fmt.Errorf("%w: cloud_authentication.gcp_service_account_json is not a service-account key: %v", ErrConfig, err)
	}
	return func(ctx context.Context, now time.Time) (string, time.Duration, error) {
		// A fresh source per token: the cache and its clock are ours.
		tok, err := conf.TokenSource(ctx).Token()
		if err != nil {
			return "", 0, fmt.Errorf("redisstore: fetching a Google access token: %w", err)
		}
		valid := time.Hour // Google's default when expires_in is absent
		if !tok.Expiry.IsZero() {
			valid = time.Until(tok.Expiry)
		}
		return tok.AccessToken, valid, nil
	}, nil
}

// azureScope is the scope of Azure Managed Redis tokens.
const azureScope = "https://redis.azure.com/.default"

func azureTokenFetcher(ca *CloudAuth, username string) (func(context.Context, time.Time) (string, time.Duration, error), error) {
	for _, f := range []struct{ name, v string }{
		{"cloud_authentication.azure_client_id", ca.AzureClientID},
		{"cloud_authentication.azure_client_secret", ca.AzureClientSecret},
		{"cloud_authentication.azure_tenant_id", ca.AzureTenantID},
		{"username (the object id of the Entra principal)", username},
	} {
		if f.v == "" {
			return nil, fmt.Errorf("%w: %s is required with auth_provider azure", ErrConfig, f.name)
		}
	}
	host := ca.AzureAuthorityHost
	if host == "" {
		host = "https://login.microsoftonline.com"
	}
	endpoint, err := url.JoinPath(host, url.PathEscape(ca.AzureTenantID), "oauth2/v2.0/token")
	if err != nil {
		return nil, fmt.Errorf("%w: Azure authority host %q: %v", ErrConfig, host, err)
	}
	conf := clientcredentials.Config{
		ClientID: ca.AzureClientID, ClientSecret: ca.AzureClientSecret, TokenURL: endpoint,
		Scopes: []string{azureScope}, AuthStyle: oauth2.AuthStyleInParams,
	}
	return func(ctx context.Context, now time.Time) (string, time.Duration, error) {
		tok, err := conf.Token(ctx)
		if err != nil {
			return "", 0, fmt.Errorf("redisstore: fetching an Entra ID token: %w", err)
		}
		valid := time.Hour
		if !tok.Expiry.IsZero() {
			valid = time.Until(tok.Expiry)
		}
		return tok.AccessToken, valid, nil
	}, nil
}

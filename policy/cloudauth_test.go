package policy

import (
	"reflect"
	"testing"

	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// A cloud_authentication record reaches the store's config field by field;
// a record without auth_provider means no cloud authentication.
func TestCloudAuthMapping(t *testing.T) {
	a, err := ParseAdvanced([]byte(`{"limit":[1],"window_size":[60],"strategy":"redis","sync_rate":0,"redis":{"host":"cache.example","port":6379,"username":"app","ssl":true,
		"cloud_authentication":{"auth_provider":"aws","aws_cache_name":"my-cache","aws_region":"eu-west-1","aws_is_serverless":false,
		"aws_access_key_id":"AKID","aws_secret_access_key":"secret","aws_assume_role_arn":"arn:aws:iam::1:role/r","aws_role_session_name":"gw"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	rc := redisstoreConfig(&a.Redis)
	want := &redisstore.CloudAuth{Provider: "aws", AWSCacheName: "my-cache", AWSRegion: "eu-west-1",
		AWSAccessKeyID: "AKID", AWSSecretAccessKey: "secret", AWSAssumeRoleARN: "arn:aws:iam::1:role/r", AWSRoleSessionName: "gw"}
	if !reflect.DeepEqual(rc.CloudAuth, want) || rc.Username != "app" {
		t.Errorf("CloudAuth = %+v, username %q; want %+v, app", rc.CloudAuth, rc.Username, want)
	}

	b, err := ParseBasic([]byte(`{"minute":1,"policy":"redis","redis":{"host":"cache.example","port":6379,"username":"app","cloud_authentication":{"auth_provider":"aws","aws_cache_name":"c","aws_region":"us-east-1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	r := b.Redis.redisConfig()
	if ca := redisstoreConfig(&r).CloudAuth; ca == nil || ca.AWSCacheName != "c" || !ca.AWSServerless {
		t.Errorf("basic plugin CloudAuth = %+v, want cache c, serverless (Kong's default)", ca)
	}

	g, err := ParseAdvanced([]byte(`{"limit":[1],"window_size":[60],"strategy":"redis","sync_rate":0,"redis":{"host":"cache.example","port":6379,
		"cloud_authentication":{"auth_provider":"gcp","gcp_service_account_json":"{\"type\":\"service_account\"}"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ca := redisstoreConfig(&g.Redis).CloudAuth; ca == nil || ca.Provider != "gcp" || ca.GCPServiceAccountJSON != `{"type":"service_account"}` {
		t.Errorf("gcp CloudAuth = %+v", ca)
	}

	z, err := ParseAdvanced([]byte(`{"limit":[1],"window_size":[60],"strategy":"redis","sync_rate":0,"redis":{"host":"cache.example","port":6379,"username":"oid-1",
		"cloud_authentication":{"auth_provider":"azure","azure_client_id":"app","azure_client_secret":"s","azure_tenant_id":"t"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ca := redisstoreConfig(&z.Redis).CloudAuth; ca == nil || ca.Provider != "azure" || ca.AzureClientID != "app" || ca.AzureClientSecret != "s" || ca.AzureTenantID != "t" {
		t.Errorf("azure CloudAuth = %+v", ca)
	}

	n, err := ParseAdvanced([]byte(`{"limit":[1],"window_size":[60],"redis":{"cloud_authentication":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if ca := redisstoreConfig(&n.Redis).CloudAuth; ca != nil {
		t.Errorf("CloudAuth without auth_provider = %+v, want nil", ca)
	}
}

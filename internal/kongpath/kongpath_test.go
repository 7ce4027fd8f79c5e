package kongpath

import "testing"

// The cases follow Kong's rules in kong/tools/uri.lua: reserved
// characters keep their encoding, others are decoded; dot segments go;
// slashes merge.
func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"/", "/"},
		{"/a/b/", "/a/b/"},
		{"/a//b", "/a/b"},
		{"//", "/"},
		{"/a//", "/a/"},
		{"/e/./f", "/e/f"},
		{"/a/../b", "/b"},
		{"/a/b/..", "/a/"},
		{"/x/..", "/"},
		{"/.", "/"},
		{"/..", "/"},
		{"/../../x", "/x"},
		{"/a/.b/c", "/a/.b/c"},
		{"/a/..b", "/a/..b"},
		{"/%61%62c", "/abc"},
		{"/a%2Fb", "/a%2Fb"},
		{"/a%2fb", "/a%2Fb"},
		{"/a%3f%23%25", "/a%3F%23%25"},
		{"/c/%20d", "/c/ d"},
		{"/%2E%2E/x", "/x"},
		{"/a/%2e%2e/b", "/b"},
		{"/a/%2e/b", "/a/b"},
		{"/%zz", "/%zz"},
		{"/%4", "/%4"},
		{"/%C3%A9", "/\xc3\xa9"},
		{"/a%2F..%2Fb", "/a%2F..%2Fb"},
	} {
		if got := Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/v1/x", "/v1/x"},
		{"/c/ d", "/c/%20d"},
		{"/a%2Fb", "/a%2Fb"},
		{"/\xc3\xa9", "/%C3%A9"},
		{"/x\x00\r\n", "/x%00%0D%0A"},
		{"/!*'();:@&=+$,/?%#[]-._~", "/!*'();:@&=+$,/?%#[]-._~"},
		{"/a\"b<c>{d}|\\^`", "/a%22b%3Cc%3E%7Bd%7D%7C%5C%5E%60"},
	} {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestValidEncoding(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/a%2Fb", ""},
		{"/%zz", "%zz"},
		{"/a%4", "%4"},
		{"/a%", "%"},
		{"/%41%g1", "%g1"},
	} {
		if got := ValidEncoding(c.in); got != c.want {
			t.Errorf("ValidEncoding(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func BenchmarkNormalizePlain(b *testing.B) {
	for b.Loop() {
		Normalize("/api/v1/users/12345/orders")
	}
}

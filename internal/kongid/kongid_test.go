package kongid

import "testing"

// The vectors of lua-resty-jit-uuid's generate_v5 tests, the library Kong
// derives its ids with.
func TestV5(t *testing.T) {
	for _, c := range []struct{ ns, name, want string }{
		{"e6ebd542-06ae-11e6-8e82-bba81706b27d", "hello", "4850816f-1658-5890-8bfd-1ed14251f1f0"},
		{"e6ebd542-06ae-11e6-8e82-bba81706b27d", "foobar", "c9be99fc-326b-5066-bdba-dcd31a6d01ab"},
		{"1b985f4a-06be-11e6-aff4-ff8d14e25128", "hello", "e90a1bfc-d349-5ec0-89fe-b29f2419624b"},
		{"1b985f4a-06be-11e6-aff4-ff8d14e25128", "foobar", "98520401-1e2b-5cbb-926b-c5c4aae4e69d"},
	} {
		if got := V5(MustParse(c.ns), c.name).String(); got != c.want {
			t.Errorf("V5(%s, %q) = %s, want %s", c.ns, c.name, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	if _, ok := Parse("E6EBD542-06AE-11E6-8E82-BBA81706B27D"); !ok {
		t.Error("upper case refused")
	}
	for _, s := range []string{"", "e6ebd54206ae11e68e82bba81706b27d", "e6ebd542-06ae-11e6-8e82-bba81706b27g", "e6ebd54-206ae-11e6-8e82-bba81706b27d"} {
		if _, ok := Parse(s); ok {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}

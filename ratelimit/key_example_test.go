package ratelimit_test

import (
	"fmt"

	"github.com/seed-008287da/sluice/ratelimit"
)

func ExampleKey() {
	fmt.Println(ratelimit.Key("acme", "/api"))
	fmt.Println(ratelimit.Key("a:b", "c") == ratelimit.Key("a", "b:c"))
	// Output:
	// 4:acme4:/api
	// false
}

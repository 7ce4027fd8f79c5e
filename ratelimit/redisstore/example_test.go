package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// Two gateway nodes share counters through one Redis: one Client per
// deployment, one Store per namespace. The second node sees the first
// node's hits.
//
// The example needs a Redis on 127.0.0.1:6379, whose counters outlive one
// run, so it has no Output comment: go test compiles it but does not run
// it. The conformance tests (TestConformanceStandalone) make the same calls
// against a redis-server each test starts.
func Example() {
	c, err := redisstore.NewClient(redisstore.Config{Host: "127.0.0.1", Port: 6379, ConnectTimeout: time.Second})
	if err != nil {
		log.Print(err)
		return
	}
	defer c.Close()
	node1, _ := redisstore.New(c, redisstore.Options{Namespace: "example"})
	defer node1.Close()
	node2, _ := redisstore.New(c, redisstore.Options{Namespace: "example"})
	defer node2.Close()

	r := ratelimit.Request{Key: ratelimit.Key("consumer", "alice"), Limits: []ratelimit.Limit{ratelimit.PerHour(2).Fixed()}}
	ctx := context.Background()
	for _, s := range []*redisstore.Store{node1, node2, node1} {
		d, err := s.Take(ctx, r)
		if err != nil {
			log.Print(err)
			return
		}
		fmt.Println(d.Allowed)
	}
}

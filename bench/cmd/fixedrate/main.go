// Command fixedrate sends HTTP requests at a constant rate (open loop) and
// prints their latency percentiles: the measure of the latency a proxy
// adds below saturation, which closed-loop tools such as wrk cannot give
// (a closed loop measures queueing once the server is saturated).
//
// Every request carries X-Client: a random id in 1..clients, as
// gateway.sh's wrk script sends. Latencies are measured by vegeta from the
// moment each request was due, more workers being started when some are
// busy, so a slow response does not delay the requests after it.
//
// Usage:
//
//	fixedrate -url http://127.0.0.1:8000/ -rate 5000 -duration 10s
//
// Output, one line: rate=... requests=... success=... p50-us=... p90-us=...
// p99-us=... p999-us=... max-us=...
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func main() {
	url := flag.String("url", "", "target URL")
	rate := flag.Int("rate", 5000, "requests per second")
	duration := flag.Duration("duration", 10*time.Second, "how long to send")
	conns := flag.Int("connections", 64, "keep-alive connections")
	clients := flag.Int("clients", 100_000, "X-Client takes a random value in 1..clients")
	flag.Parse()
	if *url == "" || *rate <= 0 || *duration <= 0 || *clients <= 0 {
		fmt.Fprintln(os.Stderr, "fixedrate: -url, and positive -rate, -duration and -clients, are required")
		os.Exit(2)
	}
	targeter := func(t *vegeta.Target) error {
		t.Method = http.MethodGet
		t.URL = *url
		t.Header = http.Header{"X-Client": []string{strconv.Itoa(1 + rand.IntN(*clients))}}
		return nil
	}
	attacker := vegeta.NewAttacker(vegeta.Connections(*conns), vegeta.MaxConnections(*conns), vegeta.KeepAlive(true))
	var m vegeta.Metrics
	for res := range attacker.Attack(targeter, vegeta.Rate{Freq: *rate, Per: time.Second}, *duration, "fixedrate") {
		m.Add(res)
	}
	m.Close()
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	fmt.Printf("rate=%.0f requests=%d success=%.4f p50-us=%s p90-us=%s p99-us=%s p999-us=%s max-us=%s\n",
		m.Rate, m.Requests, m.Success, us(m.Latencies.P50), us(m.Latencies.P90), us(m.Latencies.P99),
		us(m.Latencies.Quantile(0.999)), us(m.Latencies.Max))
	if m.Success < 1 {
		fmt.Fprintf(os.Stderr, "fixedrate: %d of %d requests failed: %v\n", m.Requests-uint64(float64(m.Requests)*m.Success), m.Requests, m.Errors)
		os.Exit(1)
	}
}

// Command keymem measures the heap each limiter keeps per idle key.
//
// For every contender it builds a limiter, takes one call for each of -keys
// distinct keys (fresh strings, so the limiter pays for the copies it
// keeps), collects garbage and divides the growth of the heap in use by the
// number of keys. Output lines are in the Go benchmark format, so that
// benchstat can summarise several runs:
//
//	BenchmarkIdleKey/xtime-map 1 161.0 B/key 150.2 live-B/key
//
// B/key is the growth of HeapInuse (spans holding objects, including their
// unused slots: what the process really keeps), live-B/key the growth of
// HeapAlloc (the bytes of live objects).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"time"

	"github.com/seed-008287da/sluice/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keymem", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keys := fs.Int("keys", 1_000_000, "number of distinct idle keys")
	match := fs.String("run", "", "only contenders whose name matches this regular expression")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	re, err := regexp.Compile(*match)
	if err != nil {
		fmt.Fprintf(stderr, "keymem: -run: %v\n", err)
		return 2
	}
	if *keys < 1 || *keys > 1<<24 {
		fmt.Fprintf(stderr, "keymem: -keys must be in [1, %d]\n", 1<<24)
		return 2
	}
	fmt.Fprintf(stdout, "goos: %s\ngoarch: %s\npkg: github.com/seed-008287da/sluice/bench/cmd/keymem\n", runtime.GOOS, runtime.GOARCH)
	status := 0
	for _, c := range append(bench.Contenders(), bench.SluiceContenders()...) {
		if !c.Keyed || c.Name == "harness" || !re.MatchString(c.Name) {
			continue
		}
		inuse, live, err := measure(c, *keys)
		if err != nil {
			fmt.Fprintf(stderr, "keymem: %s: %v\n", c.Name, err)
			status = 1
			continue
		}
		fmt.Fprintf(stdout, "BenchmarkIdleKey/%s\t1\t%.1f B/key\t%.1f live-B/key\n", c.Name, inuse, live)
	}
	return status
}

func heap() (inuse, alloc uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.HeapAlloc
}

// measure returns the heap in use and the live heap per key of c's limiter
// holding n idle keys.
func measure(c bench.Contender, n int) (inuse, live float64, err error) {
	inuse0, alloc0 := heap()
	inst, err := c.New(bench.Never, time.Hour)
	if err != nil {
		return 0, 0, err
	}
	for i := range n {
		ok, err := inst.Allow(bench.IPKey(i))
		if err != nil || !ok {
			return 0, 0, fmt.Errorf("key %d: allowed %v, error %v", i, ok, err)
		}
	}
	if k := inst.Keys(); k >= 0 && k != n {
		return 0, 0, fmt.Errorf("holds %d keys after %d were added", k, n)
	}
	inuse1, alloc1 := heap()
	runtime.KeepAlive(inst.Allow)
	if inst.Close != nil {
		inst.Close()
	}
	return float64(int64(inuse1)-int64(inuse0)) / float64(n), float64(int64(alloc1)-int64(alloc0)) / float64(n), nil
}

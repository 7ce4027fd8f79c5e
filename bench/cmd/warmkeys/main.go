// Command warmkeys sends one request for each client id 1..clients (as the
// X-Client header gateway.sh's load carries), over keep-alive connections,
// and exits: a warm-up after which a limiter holds every key of the load,
// so that the measured run sees its steady state rather than the first
// request of each key.
//
// Usage:
//
//	warmkeys -url http://127.0.0.1:8000/ -clients 100000 -connections 64
//
// It exits 1, naming the first failure, if any request fails or answers
// other than 2xx.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "", "target URL")
	clients := flag.Int("clients", 100_000, "send X-Client 1..clients, once each")
	conns := flag.Int("connections", 64, "keep-alive connections, one sender each")
	flag.Parse()
	if *url == "" || *clients <= 0 || *conns <= 0 {
		fmt.Fprintln(os.Stderr, "warmkeys: -url, and positive -clients and -connections, are required")
		os.Exit(2)
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: *conns, MaxConnsPerHost: *conns},
	}
	var (
		next     atomic.Int64
		failOnce sync.Once
		failure  error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range *conns {
		wg.Go(func() {
			for {
				id := next.Add(1)
				if id > int64(*clients) {
					return
				}
				if err := send(client, *url, id); err != nil {
					failOnce.Do(func() { failure = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if failure != nil {
		fmt.Fprintln(os.Stderr, "warmkeys:", failure)
		os.Exit(1)
	}
	fmt.Printf("warmkeys: %d clients in %s\n", *clients, time.Since(start).Round(time.Millisecond))
}

func send(c *http.Client, url string, id int64) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Client", strconv.FormatInt(id, 10))
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("client %d: %w", id, err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("client %d: reading the body: %w", id, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("client %d: status %d", id, resp.StatusCode)
	}
	return nil
}

package main

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// pollPause spaces the polls of a readiness condition (the loops around it
// are bounded by a deadline); it is not a wait for an event.
func pollPause() { <-time.After(10 * time.Millisecond) }

func httpGetBody(url string) (string, error) {
	res, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

func httpGetBodyMust(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

package main

import (
	"net"
	"time"
)

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// pollPause spaces the polls of a readiness condition (the loops around it
// are bounded by a deadline); it is not a wait for an event.
func pollPause() { <-time.After(10 * time.Millisecond) }

//go:build sluice_nethttp

package gateway

// tlsAllNetHTTP: see tlsmode_default.go.
const tlsAllNetHTTP = true

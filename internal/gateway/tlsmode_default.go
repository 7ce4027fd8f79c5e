//go:build !sluice_nethttp

package gateway

// tlsAllNetHTTP sends every TLS connection of an http2 listener to the
// net/http server, HTTP/1.1 included. Only the benchmark build
// (-tags sluice_nethttp, see bench/tls.sh) sets it: the design not taken.
const tlsAllNetHTTP = false

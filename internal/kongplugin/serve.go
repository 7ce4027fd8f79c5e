package kongplugin

import (
	"context"
	"flag"
	"fmt"

	"github.com/Kong/go-pdk/server"
)

// ServeOptions configures Serve. The zero value serves the plugin alone.
type ServeOptions struct {
	// InspectListen, when set, is the address on which the process serves
	// InspectHandler (docs/kong-plugins.md): a loopback one unless
	// InspectToken is set.
	InspectListen string
	// InspectToken, when set, is the token every inspect call must carry
	// in Kong-Admin-Token.
	InspectToken string
}

// Serve runs the plugin server of one sluice plugin for Kong until Kong
// stops it: a Process with default options, the plugin's configs made by
// newConfig ((*Process).NewRateLimiting, NewDimensions or NewConcurrency),
// at the given priority. go-pdk's own flags (-dump, -kong-prefix) are read by
// server.StartServer; the commands parse theirs before calling Serve.
func Serve(version string, priority int, newConfig func(*Process) any, o ServeOptions) error {
	p := NewProcess(Options{})
	defer p.Close()
	// Not for -dump (Kong's query command): it exits at once, and must not
	// take the address of a running server.
	if f := flag.Lookup("dump"); o.InspectListen != "" && (f == nil || f.Value.String() != "true") {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, err := p.ListenInspect(ctx, o.InspectListen, o.InspectToken)
		if err != nil {
			return fmt.Errorf("kongplugin: inspect listener: %w", err)
		}
		p.log.Info("kongplugin: inspect listening", "addr", a.String(), "token", o.InspectToken != "")
	}
	return server.StartServer(func() any { return newConfig(p) }, version, priority)
}

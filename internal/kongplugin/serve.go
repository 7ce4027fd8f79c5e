package kongplugin

import "github.com/Kong/go-pdk/server"

// Serve runs the plugin server of one sluice plugin for Kong until Kong
// stops it: a Process with default options, the plugin's configs made by
// newConfig ((*Process).NewRateLimiting, NewDimensions or NewConcurrency),
// at the given priority. go-pdk's own flags (-dump, -kong-prefix) are read by
// server.StartServer; the commands parse theirs before calling Serve.
func Serve(version string, priority int, newConfig func(*Process) any) error {
	p := NewProcess(Options{})
	defer p.Close()
	return server.StartServer(func() any { return newConfig(p) }, version, priority)
}

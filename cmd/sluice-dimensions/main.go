// Command sluice-dimensions is a Kong plugin server (go-pdk) for the
// sluice-dimensions business plugin: it builds a composite rate-limit key
// from request dimensions, finds its quota override, and hands both to
// sluice-rate-limiting through kong.ctx.shared. Quota overrides named by
// overrides_file or overrides_etcd_* are watched once per process.
// Kong starts it with the start command of kong.conf (see
// deploy/kong/kong.conf); -dump prints the plugin's schema for Kong's query
// command; -kong-prefix sets where the socket is created.
package main

import (
	"flag"
	"fmt"
	"log"

	"github.com/seed-008287da/sluice/internal/buildinfo"
	"github.com/seed-008287da/sluice/internal/kongplugin"
)

func main() {
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(buildinfo.Version())
		return
	}
	if err := kongplugin.Serve(buildinfo.Version(), kongplugin.DimensionsPriority, (*kongplugin.Process).NewDimensions, kongplugin.ServeOptions{}); err != nil {
		log.Fatal(err)
	}
}

// Command sluice-rate-limiting is a Kong plugin server (go-pdk) for the
// sluice-rate-limiting plugin: Kong's rate-limiting-advanced config and
// behaviour, over sluice's policy engine, for any Kong 3.x including OSS.
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
	if err := kongplugin.Serve(buildinfo.Version(), kongplugin.RateLimitingPriority, (*kongplugin.Process).NewRateLimiting); err != nil {
		log.Fatal(err)
	}
}

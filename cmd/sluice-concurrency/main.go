// Command sluice-concurrency is a Kong plugin server (go-pdk) for the
// sluice-concurrency plugin: a bound on requests in flight per key (long
// polls), with leases in memory or in Redis, for any Kong 3.x.
// Kong starts it with the start command of kong.conf (see
// deploy/kong/kong.conf); -dump prints the plugin's schema for Kong's query
// command; -kong-prefix sets where the socket is created.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/buildinfo"
	"github.com/seed-008287da/sluice/internal/kongplugin"
)

func main() {
	showVersion := flag.Bool("version", false, "print the version and exit")
	inspect := flag.String("inspect-listen", os.Getenv("SLUICE_INSPECT_LISTEN"), "address of the local HTTP listener for counters, resets and top lists (docs/kong-plugins.md); loopback unless -admin-token-file is set; empty disables it")
	tokenFile := flag.String("admin-token-file", os.Getenv("SLUICE_ADMIN_TOKEN_FILE"), "`file` holding the token every -inspect-listen call must carry in Kong-Admin-Token; required when -inspect-listen is not on loopback")
	flag.Parse()
	if *showVersion {
		fmt.Println(buildinfo.Version())
		return
	}
	var token string
	if *tokenFile != "" {
		var err error
		if token, err = adminauth.ReadTokenFile(*tokenFile); err != nil {
			log.Fatal(err)
		}
	}
	if err := kongplugin.Serve(buildinfo.Version(), kongplugin.ConcurrencyPriority, (*kongplugin.Process).NewConcurrency, kongplugin.ServeOptions{InspectListen: *inspect, InspectToken: token}); err != nil {
		log.Fatal(err)
	}
}

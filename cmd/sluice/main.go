// Command sluice is a Kong-compatible rate-limiting gateway.
//
//	sluice run -c kong.yml      serve (the default command)
//	sluice validate kong.yml    check a configuration, print every error
//	sluice version              print the version
//
// SIGHUP re-reads the configuration file; SIGINT and SIGTERM drain and stop.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	code := run(ctx, os.Args, hup, os.Stdout, os.Stderr)
	signal.Stop(hup)
	stop()
	os.Exit(code)
}

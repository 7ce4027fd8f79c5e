// Command sluice is a Kong-compatible rate-limiting gateway.
//
//	sluice run -c kong.yml      serve (the default command)
//	sluice validate kong.yml    check a configuration, print every error
//	sluice version              print the version
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Command sluice-dimensions is a Kong plugin server (go-pdk) for the
// sluice-dimensions business plugin: it builds a composite rate-limit key
// from request dimensions, finds its quota override, and hands both to
// sluice-rate-limiting through kong.ctx.shared. Quota overrides named by
// overrides_file are watched here, once per process, by polling the
// file's size and modification time every -overrides-poll.
// Kong starts it with the start command of kong.conf (see
// deploy/kong/kong.conf); -dump prints the plugin's schema for Kong's query
// command; -kong-prefix sets where the socket is created.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/Kong/go-pdk/server"

	"github.com/seed-008287da/sluice/internal/kongplugin"
)

// version is stamped by scripts/release with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	showVersion := flag.Bool("version", false, "print the version and exit")
	poll := flag.Duration("overrides-poll", 2*time.Second, "how often an overrides_file is checked for changes")
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}
	p := kongplugin.NewProcess(kongplugin.Options{WatchOverrides: fileWatcher(*poll)})
	defer p.Close()
	if err := server.StartServer(p.NewDimensions, version, kongplugin.DimensionsPriority); err != nil {
		log.Print(err)
		p.Close()
		os.Exit(1)
	}
}

// errEtcdUnsupported is returned for etcd sources: this build watches
// files only.
var errEtcdUnsupported = errors.New("sluice-dimensions: this build watches overrides_file only; etcd sources are not supported")

// fileWatcher returns a WatchFunc that re-reads an overrides file whenever
// its content changes, checking every interval. A missing or unreadable
// file delivers no documents (the inline overrides apply) and is logged.
func fileWatcher(interval time.Duration) kongplugin.WatchFunc {
	return func(src kongplugin.OverridesSource, update func([][]byte)) (func(), error) {
		if src.File == "" {
			return nil, errEtcdUnsupported
		}
		stop, done := make(chan struct{}), make(chan struct{})
		var last []byte
		first := true
		check := func() {
			b, err := os.ReadFile(src.File)
			if err != nil {
				if first || last != nil {
					slog.Error("sluice-dimensions: reading overrides", "file", src.File, "err", err)
					update(nil)
				}
				first, last = false, nil
				return
			}
			if first || !bytes.Equal(b, last) {
				update([][]byte{b})
			}
			first, last = false, b
		}
		check()
		go func() {
			defer close(done)
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					check()
				}
			}
		}()
		return func() { close(stop); <-done }, nil
	}
}

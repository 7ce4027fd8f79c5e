package decision

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// ReloadFile reads path and reloads from it when its content differs from
// the file the configuration in use was loaded from. It reports whether a
// new configuration is in use.
func (s *Service) ReloadFile(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		err = fmt.Errorf("decision: reading config: %w", err)
		s.reloadErrors.Add(1)
		msg := err.Error()
		s.lastError.Store(&msg)
		s.log.Error("decision: config reload failed; keeping the old config", "err", err)
		if s.onReload != nil {
			s.onReload(s.gen.Load().number, err)
		}
		return false, err
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) == s.gen.Load().digest {
		return false, nil
	}
	if err := s.Reload(bytes.Clone(data)); err != nil {
		return false, err
	}
	return true, nil
}

// Watch reloads the configuration from path whenever the file changes, until
// ctx ends; it then returns nil. It watches the file's directory, so an
// editor's rename-over-write and a Kubernetes ConfigMap's symlink swap are
// both seen. A file that does not parse (also one caught half-written) is
// rejected and the old configuration stays in use until the next change.
// It returns an error only when the watch cannot be set up.
func (s *Service) Watch(ctx context.Context, path string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("decision: watching config: %w", err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("decision: watching config: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
				continue
			}
			// Errors are logged and reported by ReloadFile; a removed file
			// comes back with the next event.
			_, _ = s.ReloadFile(path)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Error("decision: config watch", "err", err)
		}
	}
}

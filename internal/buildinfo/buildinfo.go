// Package buildinfo holds the version and commit every sluice binary
// reports. scripts/release stamps them:
//
//	go build -ldflags "-X github.com/seed-008287da/sluice/internal/buildinfo.version=v1.2.3 \
//	  -X github.com/seed-008287da/sluice/internal/buildinfo.commit=0123abc"
//
// Unstamped builds report the module version and VCS revision Go recorded,
// or "(devel)".
package buildinfo

import "runtime/debug"

var (
	version string
	commit  string
)

// Version returns the release version, such as "v1.2.3", or "(devel)".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "(devel)"
}

// Commit returns the VCS revision the binary was built from (abbreviated
// to 12 characters, with "-dirty" for a modified tree), or "" when unknown.
func Commit() string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// String returns "v1.2.3 (commit 0123abc)", or just the version when the
// commit is unknown.
func String() string {
	if c := Commit(); c != "" {
		return Version() + " (commit " + c + ")"
	}
	return Version()
}

package kongplugin

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
)

// TestReleaseAndDump runs scripts/release for linux/amd64 (CI runs the same
// script; the arm64 build differs only in GOARCH), checks the tarballs
// against SHA256SUMS, unpacks each binary, and checks what it tells Kong
// with -dump: its name, phases, priority, the stamped version, and a
// schema that has every field of the config struct with the type go-pdk
// maps it to (a field of an unsupported type would be silently dropped and
// Kong would then reject configs using it).
func TestReleaseAndDump(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	const version = "v1.2.0-test.1"
	cmd := exec.Command(filepath.Join(root, "scripts/release"), version)
	cmd.Env = append(os.Environ(), "DIST="+dist, "ARCHS=amd64", "BINARIES=sluice-rate-limiting sluice-dimensions sluice-concurrency")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release: %v\n%s", err, out)
	}
	sums := readSums(t, filepath.Join(dist, "SHA256SUMS"))
	plugins := []struct {
		name     string
		cfg      any
		phases   []string
		priority int
	}{
		{"sluice-rate-limiting", RateLimitingConfig{}, []string{"access"}, RateLimitingPriority},
		{"sluice-dimensions", DimensionsConfig{}, []string{"access"}, DimensionsPriority},
		{"sluice-concurrency", ConcurrencyConfig{}, []string{"access", "log"}, ConcurrencyPriority},
	}
	if len(sums) != len(plugins) {
		t.Errorf("SHA256SUMS lists %d files, want %d", len(sums), len(plugins))
	}
	for _, pl := range plugins {
		t.Run(pl.name, func(t *testing.T) {
			tarball := pl.name + "-" + version + "-linux-amd64.tar.gz"
			data, err := os.ReadFile(filepath.Join(dist, tarball))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if sums[tarball] != hex.EncodeToString(sum[:]) {
				t.Errorf("checksum of %s does not match SHA256SUMS", tarball)
			}
			bin := untar(t, filepath.Join(dist, tarball), strings.TrimSuffix(tarball, ".tar.gz")+"/"+pl.name)
			out, err := exec.Command(bin, "-version").Output()
			if err != nil || strings.TrimSpace(string(out)) != version {
				t.Errorf("-version = %q, %v", out, err)
			}
			out, err = exec.Command(bin, "-dump").Output()
			if err != nil {
				t.Fatalf("-dump: %v", err)
			}
			var info struct {
				Protocol string
				Plugins  []struct {
					Name     string
					Phases   []string
					Version  string
					Priority int
					Schema   map[string]any
				}
			}
			if err := json.Unmarshal(out, &info); err != nil {
				t.Fatalf("-dump output %q: %v", out, err)
			}
			if info.Protocol != "ProtoBuf:1" || len(info.Plugins) != 1 {
				t.Fatalf("dump = %s", out)
			}
			d := info.Plugins[0]
			if d.Name != pl.name || d.Version != version || d.Priority != pl.priority || !slices.Equal(d.Phases, pl.phases) {
				t.Errorf("dump: name %q version %q priority %d phases %q", d.Name, d.Version, d.Priority, d.Phases)
			}
			fields := d.Schema["fields"].([]any)
			config := fields[0].(map[string]any)["config"]
			checkSchema(t, "config", reflect.TypeOf(pl.cfg), config)
			if pl.name == "sluice-rate-limiting" {
				checkSocket(t, bin)
			}
		})
	}
}

// checkSocket runs the real binary as Kong does (its start command with
// -kong-prefix), and drives it through its Unix socket: start an instance
// with a config as Kong sends it, then access events answered by the fake
// Kong, until the limit rejects one.
func checkSocket(t *testing.T, bin string) {
	prefix, err := os.MkdirTemp("", "kong")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(prefix)
	cmd := exec.Command(bin, "-kong-prefix", prefix)
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("plugin server log:\n%s", logs.String())
		}
	}()
	sock := filepath.Join(prefix, "sluice-rate-limiting.socket")
	dial := func() net.Conn {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			conn, err := net.Dial("unix", sock)
			if err == nil {
				return conn
			}
			if time.Now().After(deadline) {
				t.Fatalf("plugin server socket %s not ready: %v", sock, err)
			}
			time.Sleep(20 * time.Millisecond) // readiness poll, bounded above
		}
	}
	conn := dial()
	defer conn.Close()
	config := []byte(`{"limit": [1], "window_size": [3600], "window_type": "fixed", "identifier": "ip", "namespace": "socket",
		"strategy": null, "redis": null, "throttling": null, "sync_rate": null, "shared_key": null, "sluice": null,
		"route_id": null, "service_id": null, "consumer_id": null, "__plugin_id": "0b9d", "__seq__": 11, "__key__": "plugins:x"}`)
	id, err := kongtest.StartInstance(conn, 1, "sluice-rate-limiting", config)
	if err != nil {
		t.Fatal(err)
	}
	k := kongtest.New(t, kongtest.Request{ForwardedIP: "192.0.2.1"})
	calls, err := k.HandleEvent(conn, 2, id, "access")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"kong.client.get_forwarded_ip", "kong.response.set_headers"}; !slices.Equal(calls, want) || k.Exit() != nil {
		t.Fatalf("first request: calls %q, exit %+v", calls, k.Exit())
	}
	if got := k.ResponseHeaders().Get("X-RateLimit-Remaining-Hour"); got != "0" {
		t.Errorf("X-RateLimit-Remaining-Hour = %q", got)
	}
	k = kongtest.New(t, kongtest.Request{ForwardedIP: "192.0.2.1"})
	if _, err := k.HandleEvent(conn, 3, id, "access"); err != nil {
		t.Fatal(err)
	}
	if e := k.Exit(); e == nil || e.Status != 429 || string(e.Body) != `{"message":"API rate limit exceeded"}` {
		t.Fatalf("second request: exit %+v", e)
	}
}

// checkSchema compares a go-pdk schema node with the Go type it came from.
func checkSchema(t *testing.T, path string, typ reflect.Type, node any) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	m, ok := node.(map[string]any)
	if !ok {
		t.Errorf("%s: schema node %v", path, node)
		return
	}
	want := map[reflect.Kind]string{reflect.String: "string", reflect.Bool: "boolean", reflect.Int: "integer",
		reflect.Float64: "number", reflect.Slice: "array", reflect.Struct: "record"}[typ.Kind()]
	if want == "" {
		t.Errorf("%s: Go type %s has no Kong schema type: go-pdk drops it", path, typ)
		return
	}
	if m["type"] != want {
		t.Errorf("%s: schema type %v, want %s", path, m["type"], want)
		return
	}
	switch typ.Kind() {
	case reflect.Slice:
		checkSchema(t, path+"[]", typ.Elem(), m["elements"])
	case reflect.Struct:
		got := map[string]any{}
		for _, f := range m["fields"].([]any) {
			for name, sub := range f.(map[string]any) {
				got[name] = sub
			}
		}
		n := 0
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			n++
			name := f.Tag.Get("json")
			if name == "" || strings.Contains(name, ",") {
				t.Errorf("%s.%s: json tag %q is not a bare field name", path, f.Name, name)
				continue
			}
			sub, ok := got[name]
			if !ok {
				t.Errorf("%s.%s: dropped from the schema", path, name)
				continue
			}
			checkSchema(t, path+"."+name, f.Type, sub)
		}
		if n != len(got) {
			t.Errorf("%s: schema has %d fields, struct %d", path, len(got), n)
		}
	}
}

func readSums(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		sums[name] = sum
	}
	return sums
}

// untar extracts member from a .tar.gz into a temp dir and returns its
// path.
func untar(t *testing.T, file, member string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s: no %s", file, member)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != member {
			continue
		}
		if h.Mode&0o111 == 0 {
			t.Errorf("%s is not executable (mode %o)", member, h.Mode)
		}
		out := filepath.Join(t.TempDir(), filepath.Base(member))
		w, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

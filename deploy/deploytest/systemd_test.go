package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnits runs systemd-analyze verify on each unit in
// deploy/systemd, inside a root holding the unit, the binary its ExecStart
// names (built from this tree) and the system's own units; any warning
// about the unit (an unknown directive, a misspelt syscall group, which
// verify only warns about) fails the test.
func TestSystemdUnits(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze is needed (Debian's systemd package; scripts/check installs it)")
	}
	root := t.TempDir()
	for _, dir := range []string{"etc/systemd/system", "usr/local/bin", "usr/lib/systemd", "bin"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "-a", "/usr/lib/systemd/system", filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copying the system units: %v\n%s", err, out)
	}
	if out, err := exec.Command("cp", "/bin/kill", filepath.Join(root, "bin/kill")).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	units, err := filepath.Glob("../systemd/*.service")
	if err != nil || len(units) != 2 {
		t.Fatalf("units %v %v", units, err)
	}
	for _, unit := range units {
		name := filepath.Base(unit)
		bin := strings.TrimSuffix(name, ".service")
		build := exec.Command("go", "build", "-o", filepath.Join(root, "usr/local/bin", bin), "./cmd/"+bin)
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", bin, err, out)
		}
		data, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"ExecReload=/bin/kill -HUP $MAINPID", "DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes"} {
			if !strings.Contains(string(data), want+"\n") {
				t.Errorf("%s lacks %s", name, want)
			}
		}
		if err := os.WriteFile(filepath.Join(root, "etc/systemd/system", name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("systemd-analyze", "verify", "--root="+root, name).CombinedOutput()
		if err != nil {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, name) || strings.Contains(line, "/"+bin) {
				t.Errorf("systemd-analyze verify %s: %s", name, line)
			}
		}
	}
}

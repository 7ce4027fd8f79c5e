package deploytest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const (
	alertsFile    = "../prometheus/sluice-alerts.yml"
	dashboardFile = "../grafana/sluice-dashboard.json"
)

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is needed (Debian's prometheus package; scripts/check installs it)")
	}
	return p
}

// TestAlertRules checks the alerting rules and runs their unit tests
// (deploy/prometheus/sluice-alerts_test.yml: each alert fires on the series
// it is meant for, and not before).
func TestAlertRules(t *testing.T) {
	pt := promtool(t)
	for _, args := range [][]string{{"check", "rules", "sluice-alerts.yml"}, {"test", "rules", "sluice-alerts_test.yml"}} {
		cmd := exec.Command(pt, args...)
		cmd.Dir = "../prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

type dashboard struct {
	Panels []struct {
		Title   string
		Targets []struct{ Expr string }
	}
}

// TestDashboard validates the Grafana dashboard against the schema in
// testdata and checks that every query is valid PromQL (promtool reads
// each as a recording rule, with Grafana's variables replaced).
func TestDashboard(t *testing.T) {
	c := jsonschema.NewCompiler()
	sch, err := c.Compile("testdata/grafana-dashboard.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inst, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			n++
			q, _ := json.Marshal(vars.Replace(tg.Expr)) // a JSON string is a YAML string
			fmt.Fprintf(&rules, "      - record: dashboard_query_%d\n        expr: %s\n", n, q)
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool(t), "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("a dashboard query is not valid PromQL: %v\n%s", err, out)
	}
}

// TestMetricsExist: every sluice metric the alerts and the dashboard read
// is one the gateway or the decision service exports (a query of a metric
// that does not exist is an empty panel, an alert that never fires).
func TestMetricsExist(t *testing.T) {
	defined := map[string]bool{}
	re := regexp.MustCompile(`Name:\s+"(sluice_[a-z_]+)"`)
	err := filepath.WalkDir("../../internal", func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		for _, m := range re.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string][]string{}
	use := regexp.MustCompile(`sluice_[a-z_]+`)
	for _, file := range []string{alertsFile, dashboardFile} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range use.FindAllString(string(b), -1) {
			used[m] = append(used[m], filepath.Base(file))
		}
	}
	var missing []string
	for m, files := range used {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
		if m == "sluice_overview" || strings.HasPrefix(m, "sluice_alerts") || defined[base] {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (in %s)", m, strings.Join(files, ", ")))
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics no sluice binary exports:\n%s", strings.Join(missing, "\n"))
	}
	if len(used) < 10 {
		t.Errorf("only %d metrics found in the alerts and the dashboard: the pattern is off", len(used))
	}
}

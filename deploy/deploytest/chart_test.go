package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/sluice"

// objects is a rendered release, by kind and name.
type objects struct {
	configMaps  map[string]corev1.ConfigMap
	deployments map[string]appsv1.Deployment
	services    map[string]corev1.Service
	pdbs        map[string]policyv1.PodDisruptionBudget
}

// render renders the chart as `helm template` would with the given values
// (YAML, merged over values.yaml) and decodes every manifest strictly into
// its Kubernetes type, so a misspelt field fails the test.
func render(t *testing.T, values string) objects {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Validate(); err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "edge", Namespace: "web", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatal(err)
	}
	o := objects{map[string]corev1.ConfigMap{}, map[string]appsv1.Deployment{}, map[string]corev1.Service{}, map[string]policyv1.PodDisruptionBudget{}}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			decode := func(v any) {
				if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
					t.Fatalf("%s: %s: %v\n%s", name, meta.Kind, err, doc)
				}
			}
			switch meta.Kind {
			case "ConfigMap":
				var v corev1.ConfigMap
				decode(&v)
				o.configMaps[v.Name] = v
			case "Deployment":
				var v appsv1.Deployment
				decode(&v)
				o.deployments[v.Name] = v
			case "Service":
				var v corev1.Service
				decode(&v)
				o.services[v.Name] = v
			case "PodDisruptionBudget":
				var v policyv1.PodDisruptionBudget
				decode(&v)
				o.pdbs[v.Name] = v
			default:
				t.Fatalf("%s: unexpected kind %q", name, meta.Kind)
			}
		}
	}
	return o
}

func TestChartDefaults(t *testing.T) {
	o := render(t, "")
	for _, c := range []struct{ name, file, port, image string }{
		{"edge-sluice-gateway", "kong.yml", "status", "sluice:v0.1.0"},
		{"edge-sluice-decision", "config.yaml", "http", "sluice-decision:v0.1.0"},
	} {
		d, ok := o.deployments[c.name]
		if !ok {
			t.Fatalf("no Deployment %s (have %v)", c.name, keys(o.deployments))
		}
		if *d.Spec.Replicas != 2 {
			t.Errorf("%s: replicas %d", c.name, *d.Spec.Replicas)
		}
		pod := d.Spec.Template
		if pod.Annotations["prometheus.io/scrape"] != "true" || pod.Annotations["prometheus.io/path"] != "/metrics" {
			t.Errorf("%s: annotations %v", c.name, pod.Annotations)
		}
		ctr := pod.Spec.Containers[0]
		if ctr.LivenessProbe == nil || ctr.LivenessProbe.HTTPGet == nil || ctr.LivenessProbe.HTTPGet.Path != "/status" || ctr.LivenessProbe.HTTPGet.Port.String() != c.port {
			t.Errorf("%s: liveness probe %+v", c.name, ctr.LivenessProbe)
		}
		if ctr.ReadinessProbe == nil {
			t.Errorf("%s: no readiness probe", c.name)
		}
		sc := ctr.SecurityContext
		if sc == nil || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: security context %+v", c.name, sc)
		}
		if ctr.Image != c.image {
			t.Errorf("%s: image %s", c.name, ctr.Image)
		}
		if _, ok := o.pdbs[c.name]; !ok {
			t.Errorf("no PodDisruptionBudget %s", c.name)
		}
		if _, ok := o.services[c.name]; !ok {
			t.Errorf("no Service %s", c.name)
		}
		cm, ok := o.configMaps[c.name]
		if !ok {
			t.Fatalf("no ConfigMap %s", c.name)
		}
		if pod.Spec.Volumes[0].ConfigMap == nil || pod.Spec.Volumes[0].ConfigMap.Name != c.name {
			t.Errorf("%s: volume %+v", c.name, pod.Spec.Volumes[0])
		}
		if strings.Contains(cm.Data[c.file], "redis") {
			t.Errorf("%s: the default config uses Redis although redis.host is empty:\n%s", c.name, cm.Data[c.file])
		}
	}
	checkConfigs(t, o)
}

func TestChartValues(t *testing.T) {
	o := render(t, `
image: {registry: registry.example/team, tag: v1.2.3}
redis: {host: redis.cache.svc, port: 6380}
gateway:
  replicas: 5
  trustedIPs: 10.0.0.0/8
  extraArgs: [--log-format=text]
  podDisruptionBudget: {minAvailable: 3}
decision:
  enabled: false
prometheus: {annotations: false}
`)
	if _, ok := o.deployments["edge-sluice-decision"]; ok || len(o.configMaps) != 1 || len(o.pdbs) != 1 {
		t.Fatalf("decision disabled, yet rendered: %v %v", keys(o.deployments), keys(o.configMaps))
	}
	d := o.deployments["edge-sluice-gateway"]
	if *d.Spec.Replicas != 5 || o.pdbs["edge-sluice-gateway"].Spec.MinAvailable.IntValue() != 3 {
		t.Errorf("replicas %d, pdb %v", *d.Spec.Replicas, o.pdbs["edge-sluice-gateway"].Spec.MinAvailable)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	if ctr.Image != "registry.example/team/sluice:v1.2.3" {
		t.Errorf("image %s", ctr.Image)
	}
	args := strings.Join(ctr.Args, " ")
	if !strings.Contains(args, "--trusted-ips 10.0.0.0/8") || !strings.HasSuffix(args, "--log-format=text") {
		t.Errorf("args %s", args)
	}
	if _, ok := d.Spec.Template.Annotations["prometheus.io/scrape"]; ok {
		t.Errorf("annotations %v", d.Spec.Template.Annotations)
	}
	cfg := o.configMaps["edge-sluice-gateway"].Data["kong.yml"]
	if !strings.Contains(cfg, "host: redis.cache.svc") || !strings.Contains(cfg, "port: 6380") || !strings.Contains(cfg, "strategy: redis") {
		t.Errorf("the Redis address is not in the config:\n%s", cfg)
	}
	checkConfigs(t, o)

	o = render(t, `
gateway: {existingConfigSecret: gateway-config}
decision: {existingConfigSecret: decision-config}
`)
	if len(o.configMaps) != 0 {
		t.Errorf("ConfigMaps rendered beside existing Secrets: %v", keys(o.configMaps))
	}
	for name, secret := range map[string]string{"edge-sluice-gateway": "gateway-config", "edge-sluice-decision": "decision-config"} {
		v := o.deployments[name].Spec.Template.Spec.Volumes[0]
		if v.Secret == nil || v.Secret.SecretName != secret {
			t.Errorf("%s: volume %+v", name, v)
		}
	}
}

// checkConfigs runs the rendered configurations through the binaries' own
// checkers: the chart must not ship a configuration sluice refuses.
func checkConfigs(t *testing.T, o objects) {
	t.Helper()
	dir := t.TempDir()
	for name, cm := range o.configMaps {
		for file, data := range cm.Data {
			path := filepath.Join(dir, name+"-"+file)
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			var args []string
			switch file {
			case "kong.yml":
				args = []string{"run", "./cmd/sluice", "validate", path}
			case "config.yaml":
				args = []string{"run", "./cmd/sluice-decision", "-check", "-c", path}
			default:
				t.Fatalf("%s: unexpected file %s", name, file)
			}
			cmd := exec.Command("go", args...)
			cmd.Dir = "../.."
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s %s: %v\n%s\n%s", name, file, err, out, data)
			}
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

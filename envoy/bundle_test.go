package envoy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// shippedFiles lists every deployment file this directory ships, relative to it. Each one
// is read by at least one check; TestEveryShippedFileIsChecked keeps the list complete.
var shippedFiles = []string{
	"envoy.yaml",
	"compose.yaml",
	"Dockerfile",
	"istio/wasmplugin.yaml",
	"istio/trafficextension.yaml",
	"istio/service.yaml",
	"istio/redis.yaml",
	"istio/gateway.yaml",
	"istio/secret.yaml",
	"istio/authorizationpolicy.yaml",
	"istio/kustomization.yaml",
	"istio-overlay/kustomization.yaml",
	"istio-overlay/parameters.yaml",
	"ratelimit/envoy.yaml",
	"ratelimit/config/edge.yaml",
	"ratelimit/istio.yaml",
	"ratelimit/quota-routing.yaml",
	"ratelimit/config/backends.yaml",
}

// bundle holds the shipped files' contents by path, so that a test can validate a mutated
// copy exactly as it validates the files on disk.
type bundle map[string][]byte

// file returns the contents of path, or an error naming a file the bundle lacks.
func (b bundle) file(path string) ([]byte, error) {
	data, ok := b[path]
	if !ok {
		return nil, fmt.Errorf("%s: not in the bundle", path)
	}
	return data, nil
}

// with returns a copy of b in which the first occurrence of old in path is replaced by new.
// It fails the test if old does not occur, so that a mutation can never silently be a no-op.
func (b bundle) with(t *testing.T, path, old, new string) bundle {
	t.Helper()
	data, err := b.file(path)
	require.NoError(t, err)
	require.Contains(t, string(data), old, "the mutation must change %s", path)
	c := make(bundle, len(b))
	for k, v := range b {
		c[k] = v
	}
	c[path] = []byte(strings.Replace(string(data), old, new, 1))
	return c
}

func loadBundle(t *testing.T) bundle {
	t.Helper()
	b := bundle{}
	for _, p := range shippedFiles {
		data, err := os.ReadFile(filepath.FromSlash(p))
		require.NoError(t, err)
		b[p] = data
	}
	return b
}

// check is one validation of the bundle.
type check struct {
	name string
	fn   func(bundle) error
}

// checks is every validation of the shipped files. Each returns all it finds, joined.
var checks = []check{
	{"envoy.yaml is a valid Envoy bootstrap", checkBootstrap},
	{"envoy.yaml's wasm filter loads meshlimit with a configuration the filter accepts", checkEnvoyPlugin},
	{"the WasmPlugin is valid and its pluginConfig is accepted by the filter", checkWasmPlugin},
	{"the TrafficExtension is valid and configures the same plugin as the WasmPlugin", checkTrafficExtension},
	{"the Kubernetes manifests decode strictly and agree with each other", checkKubernetes},
	{"only the workloads that run the filter may call the decision service, with mutual TLS", checkCallers},
	{"the plugin's global cluster is the decision Service's HTTP port", checkIstioCluster},
	{"the plugin's route names are routes of the VirtualService on the same gateway", checkIstioRoutes},
	{"compose.yaml runs what envoy.yaml expects", checkCompose},
	{"envoy.yaml and the Istio manifests fail the same way", checkFailStrategy},
	{"the Dockerfile builds the service for the port every file uses", checkDockerfile},
	{"every Redis refuses writes when full instead of evicting counters", checkRedisMemory},
	{"the kustomize overlay renders the base with its parameters and nothing else", checkKustomize},
}

// validate runs every check on b and joins their errors.
func validate(b bundle) error {
	var errs []error
	for _, c := range checks {
		if err := c.fn(b); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

func TestShippedFilesAreValid(t *testing.T) {
	b := loadBundle(t)
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, c.fn(b))
		})
	}
}

func TestEveryShippedFileIsChecked(t *testing.T) {
	listed := map[string]bool{}
	for _, p := range shippedFiles {
		listed[p] = true
	}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (p == "cmd" || strings.HasPrefix(d.Name(), ".")) && p != "." {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(p); ext == ".yaml" || ext == ".yml" || d.Name() == "Dockerfile" {
			assert.True(t, listed[filepath.ToSlash(p)], "%s is shipped but no check reads it: add it to shippedFiles and a check", p)
		}
		return nil
	})
	require.NoError(t, err)
}

// TestMutationsFail proves that the checks catch mistakes: each case breaks one shipped
// file in one place, and validation must then fail for the stated reason.
func TestMutationsFail(t *testing.T) {
	b := loadBundle(t)
	require.NoError(t, validate(b), "the shipped files must be valid before mutating them")

	cases := []struct {
		name     string
		path     string
		old, new string
		want     string // a part of the expected error
	}{
		{"an unknown field in envoy.yaml's plugin configuration fails", "envoy.yaml",
			`"key": ["client_ip"]`, `"keys": ["client_ip"]`, "rules[0].keys: unknown field"},
		{"a bad rate in envoy.yaml's plugin configuration fails", "envoy.yaml",
			`"rate": "5/s"`, `"rate": "5/x"`, `invalid rate "5/x"`},
		{"a global cluster that envoy.yaml does not define fails", "envoy.yaml",
			`- name: meshlimit_service`, `- name: meshlimit-service`, `global.cluster "meshlimit_service" is not a cluster`},
		{"a misspelled Envoy field fails", "envoy.yaml",
			`connect_timeout: 0.25s`, `connect_timout: 0.25s`, `unknown field "connect_timout"`},
		{"a port that Envoy's validation rejects fails", "envoy.yaml",
			`port_value: 10000`, `port_value: 70000`, "PortValue"},
		{"a route to an undefined cluster fails", "envoy.yaml",
			`route: {cluster: echo, timeout: 15s}`, `route: {cluster: echoes, timeout: 15s}`, `route "search" goes to cluster "echoes"`},
		{"a plugin route name that envoy.yaml does not have fails", "envoy.yaml",
			`- name: search`, `- name: find`, `route name "search" is not a route`},
		{"an empty vm_id fails", "envoy.yaml",
			`vm_id: meshlimit`, `vm_id: ""`, `vm_id ""`},
		{"a plugin configuration that is not a StringValue fails", "envoy.yaml",
			`google.protobuf.StringValue`, `google.protobuf.Value`, "want a google.protobuf.StringValue"},
		{"envoy.yaml without path normalization fails", "envoy.yaml",
			`normalize_path: true`, `normalize_path: false`, "normalize_path must be true"},
		{"envoy.yaml without merged slashes fails", "envoy.yaml",
			`merge_slashes: true`, `merge_slashes: false`, "merge_slashes must be true"},
		{"envoy.yaml forwarding escaped slashes fails", "envoy.yaml",
			`path_with_escaped_slashes_action: UNESCAPE_AND_REDIRECT`, `path_with_escaped_slashes_action: KEEP_UNCHANGED`, "lets %2F through"},
		{"a last HTTP filter that is not the router fails", "envoy.yaml",
			`type.googleapis.com/envoy.extensions.filters.http.router.v3.Router`, `type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm`, "the last HTTP filter must be the router"},

		{"an unknown field in the WasmPlugin's pluginConfig fails", "istio/wasmplugin.yaml",
			`failure_mode: allow`, `failure_mod: allow`, "rules[1].failure_mod: unknown field"},
		{"a bad rate in the WasmPlugin's pluginConfig fails", "istio/wasmplugin.yaml",
			`rate: 10/s`, `rate: 10/x`, `invalid rate "10/x"`},
		{"a WasmPlugin that fails open while envoy.yaml fails closed fails", "istio/wasmplugin.yaml",
			`failStrategy: FAIL_CLOSE`, `failStrategy: FAIL_OPEN`, "fail strategies disagree"},
		{"an envoy.yaml that fails open while Istio fails closed fails", "envoy.yaml",
			`fail_open: false`, `fail_open: true`, "fail strategies disagree"},
		{"a misspelled WasmPlugin field fails", "istio/wasmplugin.yaml",
			`failStrategy: FAIL_CLOSE`, `failStrategie: FAIL_CLOSE`, `unknown field "failStrategie"`},
		{"an unknown WasmPlugin phase fails", "istio/wasmplugin.yaml",
			`phase: AUTHZ`, `phase: AUTHORIZATION`, "AUTHORIZATION"},
		{"a WasmPlugin module that is not an OCI image fails", "istio/wasmplugin.yaml",
			`url: oci://`, `url: ftp://`, "url"},
		{"a global cluster on a port the Service lacks fails", "istio/wasmplugin.yaml",
			`cluster: outbound|8081||`, `cluster: outbound|8080||`, "has no port 8080"},
		{"a global cluster that is not an Istio cluster name fails", "istio/wasmplugin.yaml",
			`cluster: outbound|8081||meshlimit.meshlimit.svc.cluster.local`, `cluster: meshlimit.meshlimit.svc.cluster.local`, "required unless"},
		{"a TrafficExtension that drifts from the WasmPlugin fails", "istio/trafficextension.yaml",
			`rate: 100/m`, `rate: 200/m`, "pluginConfig differs"},
		{"an unknown TrafficExtension enum value fails", "istio/trafficextension.yaml",
			`failStrategy: FAIL_CLOSE`, `failStrategy: FAIL_CLOSED`, "FAIL_CLOSED"},
		{"a TrafficExtension with the module outside spec.wasm fails", "istio/trafficextension.yaml",
			"  priority: 10\n  wasm:\n", "  priority: 10\n  pluginName: meshlimit\n  wasm:\n", `unknown field "pluginName"`},
		{"a plugin route name the VirtualService lacks fails", "istio/gateway.yaml",
			`- name: orders`, `- name: order`, `route name "orders"`},
		{"a VirtualService on another gateway fails", "istio/gateway.yaml",
			`- istio-system/api`, `- istio-system/other`, "istio-system/other"},

		{"a misspelled Deployment field fails", "istio/service.yaml",
			`readinessProbe:`, `readinesProbe:`, `unknown field "readinesProbe"`},
		{"a readiness probe on another path fails", "istio/service.yaml",
			`path: /readyz`, `path: /ready`, "/readyz"},
		{"a Redis address that no Service answers fails", "istio/service.yaml",
			`redis.meshlimit.svc.cluster.local:6379`, `redis.meshlimit.svc.cluster.local:6380`, "redis.meshlimit.svc.cluster.local:6380"},
		{"a Service whose target port no container has fails", "istio/redis.yaml",
			`targetPort: tcp-redis`, `targetPort: redis`, `target port "redis"`},
		{"a decision Service port that is not HTTP fails", "istio/service.yaml",
			"  - name: http\n    appProtocol: http\n", "  - name: tcp\n    appProtocol: tcp\n", "not HTTP"},

		{"compose mounting the module at another path fails", "compose.yaml",
			`/etc/envoy/meshlimit.wasm:ro`, `/etc/envoy/plugin.wasm:ro`, "/etc/envoy/meshlimit.wasm"},
		{"compose mounting a module other than make wasm's fails", "compose.yaml",
			`../build/meshlimit.wasm:`, `./meshlimit.wasm:`, "build/meshlimit.wasm"},
		{"compose not publishing the listener fails", "compose.yaml",
			`127.0.0.1:10000:10000`, `127.0.0.1:10001:10001`, "port 10000"},
		{"compose running the service on another port fails", "compose.yaml",
			`MESHLIMIT_LISTEN: ":8081"`, `MESHLIMIT_LISTEN: ":8082"`, "8082"},
		{"compose with an Envoy older than 1.33 fails", "compose.yaml",
			`envoyproxy/envoy:v1.35.13`, `envoyproxy/envoy:v1.32.0`, "1.33"},
		{"compose setting a variable service.yaml does not set fails", "compose.yaml",
			`MESHLIMIT_REDIS: redis:6379`, `MESHLIMIT_REDIS_URL: redis:6379`, "MESHLIMIT_REDIS"},
		{"a misspelled compose field fails", "compose.yaml",
			`depends_on:`, `depend_on:`, `unknown field "depend_on"`},
		{"a service deadline longer than the filter's call timeout fails", "compose.yaml",
			`MESHLIMIT_TIMEOUT: 10ms`, `MESHLIMIT_TIMEOUT: 50ms`, "more than half the plugin's global.timeout"},
		{"a Kubernetes service deadline of more than half the filter's call timeout fails", "istio/service.yaml",
			`value: 10ms`, `value: 15ms`, "more than half the plugin's global.timeout"},
		{"a Redis that evicts keys fails", "istio/redis.yaml",
			`"--maxmemory-policy", "noeviction"`, `"--maxmemory-policy", "volatile-ttl"`, "want noeviction"},
		{"a Compose Redis that evicts keys fails", "compose.yaml",
			`"--maxmemory-policy", "noeviction"`, `"--maxmemory-policy", "allkeys-lru"`, "want noeviction"},
		{"a Redis without maxmemory fails", "compose.yaml",
			`"--maxmemory", "200mb", `, ``, "--maxmemory"},
		{"a Redis whose maxmemory exceeds its container's limit fails", "istio/redis.yaml",
			`"--maxmemory", "200mb"`, `"--maxmemory", "300mb"`, "not below the container's memory limit"},
		{"a Dockerfile exposing another port fails", "Dockerfile",
			`EXPOSE 8081`, `EXPOSE 8080`, "8080"},
		{"a Dockerfile building another command fails", "Dockerfile",
			`./cmd/meshlimit-service`, `./cmd/demo`, "cmd/meshlimit-service"},
		{"an overlay whose replacement misses the Deployment fails", "istio-overlay/kustomization.yaml",
			`{kind: Deployment, name: meshlimit, namespace: meshlimit}`, `{kind: Deployment, name: meshlimit-service, namespace: meshlimit}`, "spec.template.spec.containers.[name=meshlimit].image is registry.example.com/meshlimit/meshlimit-service:0.1.0: want the parameter"},
		{"an overlay that applies its parameters fails", "istio-overlay/parameters.yaml",
			`config.kubernetes.io/local-config: "true"`, `example.com/note: "true"`, "applies its parameters ConfigMap"},
		{"an overlay that changes more than its parameters fails", "istio-overlay/kustomization.yaml",
			"    fieldPaths: [spec.url]", "    fieldPaths: [spec.imagePullPolicy]", "spec.url is oci://registry.example.com/meshlimit/meshlimit:0.1.0: want the parameter"},
		{"a base that leaves a file out fails", "istio/kustomization.yaml",
			"- secret.yaml\n", "", "MESHLIMIT_SECRET names Secret meshlimit-secret, which the manifests do not create"},
		{"a service reading its secret from a key the Secret lacks fails", "istio/service.yaml",
			"key: secret", "key: token", "MESHLIMIT_SECRET names key token"},
		{"a policy admitting every principal fails", "istio/authorizationpolicy.yaml",
			"- cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account", `- "*"`, `principal "*"`},
		{"a policy admitting a workload of another namespace fails", "istio/authorizationpolicy.yaml",
			"cluster.local/ns/istio-system/", "cluster.local/ns/default/", "where the WasmPlugin runs"},
		{"a policy admitting the admin API fails", "istio/authorizationpolicy.yaml",
			"paths: [/v1/check, /v1/resets]", "paths: [/v1/check, /v1/resets, /v1/admin/*]", "want only the filter's"},
		{"a policy without sources fails", "istio/authorizationpolicy.yaml",
			"  - from:\n    - source:\n        principals:\n        - cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account\n    to:", "  - to:", "want from and to"},
		{"a policy on other pods fails", "istio/authorizationpolicy.yaml",
			"      app: meshlimit", "      app: redis", "does not select the service's pods"},
		{"permissive mutual TLS fails", "istio/authorizationpolicy.yaml",
			"mode: STRICT", "mode: PERMISSIVE", "no namespace-wide STRICT PeerAuthentication"},
		{"a service that starts without its secret fails", "istio/service.yaml",
			`value: "true"`, `value: "false"`, `MESHLIMIT_REQUIRE_SECRET="false"`},
		{"a base without the policy fails", "istio/kustomization.yaml",
			"- authorizationpolicy.yaml\n", "", "the base renders no AuthorizationPolicy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validate(b.with(t, tc.path, tc.old, tc.new))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// yamlDocs splits a multi-document YAML file into its documents, dropping empty ones.
func yamlDocs(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(d []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// yamlToJSON converts one YAML document to JSON, rejecting duplicate keys.
func yamlToJSON(doc []byte) ([]byte, error) {
	return yaml.YAMLToJSONStrict(doc)
}

// decodeJSONStrict decodes JSON into v, rejecting unknown fields and trailing data.
func decodeJSONStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the document")
	}
	return nil
}

// pluginRoutes returns the route names that a plugin configuration's rules match on.
// The configuration must already have passed rules.ParseConfig.
func pluginRoutes(config []byte) ([]string, error) {
	var doc struct {
		Rules []struct {
			Match struct {
				RouteNames []string `json:"route_names"`
			} `json:"match"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(config, &doc); err != nil {
		return nil, err
	}
	var names []string
	for _, r := range doc.Rules {
		names = append(names, r.Match.RouteNames...)
	}
	return names, nil
}

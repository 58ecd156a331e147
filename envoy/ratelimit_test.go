package envoy

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// The files of the Envoy rate limit filter example, in shippedFiles.
const (
	rlsEnvoy  = "ratelimit/envoy.yaml"
	rlsConfig = "ratelimit/config/edge.yaml"
	rlsIstio  = "ratelimit/istio.yaml"
)

const (
	ratelimitFilter = "envoy.filters.http.ratelimit"
	envRLSConfig    = "MESHLIMIT_RATELIMIT_CONFIG"
	envGRPCListen   = "MESHLIMIT_GRPC_LISTEN"
)

// rlsRules loads the rate limit rules of config/ (every file, as meshlimit-service
// -ratelimit-config does) with meshlimit-service's own loader.
func rlsRules(b bundle) (*rlsconfig.Config, error) {
	var files []rlsconfig.File
	for _, p := range []string{rlsConfig, rlsBackends} {
		data, err := b.file(p)
		if err != nil {
			return nil, err
		}
		files = append(files, rlsconfig.File{Name: path.Base(p), Data: data})
	}
	return rlsconfig.Load(files)
}

// descriptorOf returns the entries that Envoy sends for one rate_limits entry, with sample
// values where Envoy takes them from the request.
func descriptorOf(rl *routev3.RateLimit) ([]rlsconfig.Entry, error) {
	var es []rlsconfig.Entry
	for _, a := range rl.GetActions() {
		switch {
		case a.GetRemoteAddress() != nil:
			es = append(es, rlsconfig.Entry{Key: "remote_address", Value: "192.0.2.1"})
		case a.GetRequestHeaders() != nil:
			es = append(es, rlsconfig.Entry{Key: a.GetRequestHeaders().GetDescriptorKey(), Value: "sample"})
		case a.GetGenericKey() != nil:
			k := a.GetGenericKey().GetDescriptorKey()
			if k == "" {
				k = "generic_key"
			}
			es = append(es, rlsconfig.Entry{Key: k, Value: a.GetGenericKey().GetDescriptorValue()})
		default:
			return nil, fmt.Errorf("action %v: not one this check knows", a)
		}
	}
	return es, nil
}

// checkDescriptors checks that every rate_limits entry sends a descriptor that matches a
// limit of domain in c: a descriptor that matches nothing is never limited, silently.
func checkDescriptors(where string, rls []*routev3.RateLimit, c *rlsconfig.Config, domain string) error {
	var errs []error
	for i, rl := range rls {
		es, err := descriptorOf(rl)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s rate_limits[%d]: %w", where, i, err))
			continue
		}
		if r, ok := c.Match(domain, len(es), func(j int) rlsconfig.Entry { return es[j] }); !ok || r.Limit == nil {
			errs = append(errs, fmt.Errorf("%s rate_limits[%d] sends %v, which matches no limit of domain %q", where, i, es, domain))
		}
	}
	return errors.Join(errs...)
}

// ratelimitFilterOf returns the rate limit filter of hcm and checks that it runs before the
// router.
func ratelimitFilterOf(filters []*hcmv3.HttpFilter) (*ratelimitv3.RateLimit, error) {
	for i, f := range filters {
		if f.GetName() != ratelimitFilter {
			continue
		}
		var rl ratelimitv3.RateLimit
		if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
			return nil, fmt.Errorf("%s: %w", ratelimitFilter, err)
		}
		if i == len(filters)-1 {
			return nil, fmt.Errorf("%s must come before the router", ratelimitFilter)
		}
		return &rl, nil
	}
	return nil, fmt.Errorf("no %s filter", ratelimitFilter)
}

// checkRateLimitConfig checks the filter's settings that meshlimit-service relies on.
func checkRateLimitConfig(rl *ratelimitv3.RateLimit, c *rlsconfig.Config) error {
	var errs []error
	if !c.HasDomain(rl.GetDomain()) {
		errs = append(errs, fmt.Errorf("domain %q is not a domain of %s (%v)", rl.GetDomain(), rlsConfig, c.Domains()))
	}
	if v := rl.GetRateLimitService().GetTransportApiVersion().String(); v != "V3" {
		errs = append(errs, fmt.Errorf("rate_limit_service.transport_api_version %s: meshlimit-service speaks V3", v))
	}
	if rl.GetFailureModeDeny() {
		errs = append(errs, errors.New("failure_mode_deny: the example fails open, as the docs say"))
	}
	return errors.Join(errs...)
}

// eachRLSManager validates the bootstrap at path p of b and loads the rules of config/, then
// for each HTTP connection manager checks its rate limit filter (settings and cluster) and
// calls f with it. It returns every error, joined.
func eachRLSManager(b bundle, p string, f func(bs *bootstrapv3.Bootstrap, rules *rlsconfig.Config, hcm *hcmv3.HttpConnectionManager, rl *ratelimitv3.RateLimit) error) error {
	bs, err := validBootstrap(b, p)
	if err != nil {
		return err
	}
	rules, err := rlsRules(b)
	if err != nil {
		return err
	}
	hcms, err := connectionManagers(bs)
	if err != nil || len(hcms) == 0 {
		return fmt.Errorf("no HTTP connection manager (%v)", err)
	}
	var errs []error
	for _, hcm := range hcms {
		rl, err := ratelimitFilterOf(hcm.GetHttpFilters())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, checkRateLimitConfig(rl, rules), checkRLSCluster(bs, rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()),
			f(bs, rules, hcm, rl))
	}
	return errors.Join(errs...)
}

// checkRatelimitBootstrap validates ratelimit/envoy.yaml and its agreement with config/.
func checkRatelimitBootstrap(b bundle) error {
	return eachRLSManager(b, rlsEnvoy, func(_ *bootstrapv3.Bootstrap, c *rlsconfig.Config, hcm *hcmv3.HttpConnectionManager, rl *ratelimitv3.RateLimit) error {
		var errs []error
		for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
			errs = append(errs, checkDescriptors("virtual host "+vh.GetName(), vh.GetRateLimits(), c, rl.GetDomain()))
			for _, r := range vh.GetRoutes() {
				errs = append(errs, checkDescriptors("route "+r.GetName(), r.GetRoute().GetRateLimits(), c, rl.GetDomain()))
			}
		}
		return errors.Join(errs...)
	})
}

// checkRLSCluster checks that the filter's cluster exists and speaks HTTP/2 (gRPC).
func checkRLSCluster(bs *bootstrapv3.Bootstrap, name string) error {
	cl := clusterByName(bs, name)
	if cl == nil {
		return fmt.Errorf("rate_limit_service cluster %q is not a cluster", name)
	}
	var po httpv3.HttpProtocolOptions
	a := cl.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if a == nil || a.UnmarshalTo(&po) != nil || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		return fmt.Errorf("cluster %q must use HTTP/2 (gRPC): explicit_http_config.http2_protocol_options", name)
	}
	return nil
}

// rlsManifests is istio.yaml decoded.
type rlsManifests struct {
	configMaps  []*corev1.ConfigMap
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	filters     []*networkingv1alpha3.EnvoyFilter
}

func loadRLSManifests(b bundle) (*rlsManifests, error) {
	data, err := b.file(rlsIstio)
	if err != nil {
		return nil, err
	}
	var m rlsManifests
	var errs []error
	for i, doc := range yamlDocs(data) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i+1, err))
			continue
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			m.configMaps, obj = append(m.configMaps, o), o
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			m.deployments, obj = append(m.deployments, o), o
		case "v1 Service":
			o := &corev1.Service{}
			m.services, obj = append(m.services, o), o
		case "networking.istio.io/v1alpha3 EnvoyFilter":
			f := &networkingv1alpha3.EnvoyFilter{}
			if _, err := decodeIstio(doc, head.APIVersion, head.Kind, f); err != nil {
				errs = append(errs, fmt.Errorf("document %d: %w", i+1, err))
			}
			m.filters = append(m.filters, f)
			continue
		default:
			errs = append(errs, fmt.Errorf("document %d: unexpected %s %s", i+1, head.APIVersion, head.Kind))
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			errs = append(errs, fmt.Errorf("document %d (%s): %w", i+1, head.Kind, err))
		}
	}
	return &m, errors.Join(errs...)
}

// patchValue decodes an EnvoyFilter patch's value into msg, strictly.
func patchValue(v *structpb.Struct, msg proto.Message) error {
	j, err := v.MarshalJSON()
	if err != nil {
		return err
	}
	return protojson.Unmarshal(j, msg)
}

// rlsServiceCluster is Istio's name for the outbound cluster of a Service port.
func rlsServiceCluster(s *corev1.Service, port int32) string {
	return fmt.Sprintf("outbound|%d||%s.%s.svc.cluster.local", port, s.Name, s.Namespace)
}

// checkRLSDeployment checks the service's Deployment: its config directory is the ConfigMap's
// mount, and returns the rules loaded from that ConfigMap and the gRPC container port.
func checkRLSDeployment(m *rlsManifests, b bundle) (*rlsconfig.Config, int32, error) {
	if len(m.deployments) != 1 {
		return nil, 0, fmt.Errorf("want one Deployment, got %d", len(m.deployments))
	}
	d := m.deployments[0]
	c0 := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c0.Env {
		env[e.Name] = e.Value
	}
	var cm *corev1.ConfigMap
	for _, vm := range c0.VolumeMounts {
		if vm.MountPath != env[envRLSConfig] {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				for _, c := range m.configMaps {
					if c.Name == v.ConfigMap.Name && c.Namespace == d.Namespace {
						cm = c
					}
				}
			}
		}
	}
	if cm == nil {
		return nil, 0, fmt.Errorf("%s=%q is not the mount of a ConfigMap of the Deployment's namespace", envRLSConfig, env[envRLSConfig])
	}
	var files []rlsconfig.File
	for name, data := range cm.Data {
		files = append(files, rlsconfig.File{Name: name, Data: []byte(data)})
	}
	rules, err := rlsconfig.Load(files)
	if err != nil {
		return nil, 0, fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	if want, _ := b.file(rlsConfig); strings.TrimSpace(cm.Data["edge.yaml"]) != strings.TrimSpace(string(want)) {
		return nil, 0, fmt.Errorf("ConfigMap %s: edge.yaml differs from %s", cm.Name, rlsConfig)
	}
	port, ok := strings.CutPrefix(env[envGRPCListen], ":")
	var grpcPort int32
	if _, err := fmt.Sscan(port, &grpcPort); !ok || err != nil {
		return nil, 0, fmt.Errorf("%s=%q: want :PORT", envGRPCListen, env[envGRPCListen])
	}
	return rules, grpcPort, nil
}

// rlsService returns the Service port (number) that reaches the gRPC port of the Deployment,
// declared as gRPC so that Istio proxies it as HTTP/2.
func rlsService(m *rlsManifests, grpcPort int32) (*corev1.Service, int32, error) {
	for _, s := range m.services {
		for _, d := range m.deployments {
			if !selects(s, d) {
				continue
			}
			for _, p := range s.Spec.Ports {
				if cp, ok := containerPort(d, p.TargetPort); ok && cp == grpcPort {
					if (p.AppProtocol == nil || *p.AppProtocol != "grpc") && !strings.HasPrefix(p.Name, "grpc") {
						return nil, 0, fmt.Errorf("Service %s port %d: declare it gRPC (appProtocol: grpc or a name starting grpc)", s.Name, p.Port)
					}
					return s, p.Port, nil
				}
			}
		}
	}
	return nil, 0, fmt.Errorf("no Service port reaches the gRPC container port %d", grpcPort)
}

func selects(s *corev1.Service, d *appsv1.Deployment) bool {
	if s.Namespace != d.Namespace || len(s.Spec.Selector) == 0 {
		return false
	}
	for k, v := range s.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			return false
		}
	}
	return true
}

// checkRatelimitIstio validates istio.yaml: the manifests strictly, the EnvoyFilters' patches
// as Envoy's messages, and that they agree with each other and with config/.
func checkRatelimitIstio(b bundle) error {
	m, err := loadRLSManifests(b)
	if err != nil {
		return err
	}
	rules, grpcPort, err := checkRLSDeployment(m, b)
	if err != nil {
		return err
	}
	svc, svcPort, err := rlsService(m, grpcPort)
	if err != nil {
		return err
	}
	var errs []error
	var domain string
	var vhPatches []*routev3.VirtualHost
	for _, f := range m.filters {
		for i, cp := range f.GetConfigPatches() {
			switch cp.GetApplyTo() {
			case networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
				var hf hcmv3.HttpFilter
				if err := patchValue(cp.GetPatch().GetValue(), &hf); err != nil {
					errs = append(errs, fmt.Errorf("configPatches[%d]: %w", i, err))
					continue
				}
				if err := validateDeep(&hf); err != nil {
					errs = append(errs, fmt.Errorf("configPatches[%d]: %w", i, err))
					continue
				}
				if cp.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE ||
					cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName() != routerFilter {
					errs = append(errs, fmt.Errorf("configPatches[%d]: insert the filter before %s", i, routerFilter))
				}
				rl, err := ratelimitFilterOf([]*hcmv3.HttpFilter{&hf, {Name: routerFilter}})
				if err != nil {
					errs = append(errs, err)
					continue
				}
				domain = rl.GetDomain()
				errs = append(errs, checkRateLimitConfig(rl, rules))
				if got, want := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(), rlsServiceCluster(svc, svcPort); got != want {
					errs = append(errs, fmt.Errorf("cluster_name %q: want %q, the Service's gRPC port", got, want))
				}
			case networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST:
				var vh routev3.VirtualHost
				if err := patchValue(cp.GetPatch().GetValue(), &vh); err != nil {
					errs = append(errs, fmt.Errorf("configPatches[%d]: %w", i, err))
					continue
				}
				for j, rl := range vh.GetRateLimits() {
					if err := rl.ValidateAll(); err != nil {
						errs = append(errs, fmt.Errorf("configPatches[%d] rate_limits[%d]: %w", i, j, err))
					}
				}
				vhPatches = append(vhPatches, &vh)
			default:
				errs = append(errs, fmt.Errorf("configPatches[%d]: unexpected applyTo %v", i, cp.GetApplyTo()))
			}
		}
	}
	if domain == "" {
		return errors.Join(append(errs, errors.New("no EnvoyFilter inserts "+ratelimitFilter))...)
	}
	for _, vh := range vhPatches {
		errs = append(errs, checkDescriptors("VIRTUAL_HOST patch", vh.GetRateLimits(), rules, domain))
	}
	return errors.Join(errs...)
}

func loadRLSBundle(t *testing.T) bundle {
	t.Helper()
	b := loadBundle(t)
	for _, p := range []string{rlsEnvoy, rlsConfig, rlsIstio, rlsQuotaRouting, rlsBackends} {
		_, err := b.file(p)
		require.NoError(t, err, "%s must be in shippedFiles", p)
	}
	return b
}

func TestTheRateLimitFilterExamplesAreValid(t *testing.T) {
	b := loadRLSBundle(t)
	t.Run("config/edge.yaml loads with meshlimit-service's loader", func(t *testing.T) {
		_, err := rlsRules(b)
		require.NoError(t, err)
	})
	t.Run("envoy.yaml is a valid bootstrap whose descriptors all match a limit", func(t *testing.T) {
		require.NoError(t, checkRatelimitBootstrap(b))
	})
	t.Run("istio.yaml decodes strictly and agrees with itself and config/", func(t *testing.T) {
		require.NoError(t, checkRatelimitIstio(b))
	})
	t.Run("quota-routing.yaml is a valid bootstrap that routes on the answer's metadata to endpoints the rules name", func(t *testing.T) {
		require.NoError(t, checkQuotaRouting(b))
	})
}

// TestRateLimitMutationsFail proves the checks catch mistakes: each case breaks one file in
// one place, and validation must fail for the stated reason.
func TestRateLimitMutationsFail(t *testing.T) {
	b := loadRLSBundle(t)
	all := func(b bundle) error {
		return errors.Join(checkRatelimitBootstrap(b), checkRatelimitIstio(b), checkQuotaRouting(b))
	}
	require.NoError(t, all(b))
	for _, tc := range []struct {
		name, path, old, new, want string
	}{
		{"a misspelled field of the rate limit filter fails", rlsEnvoy, "              failure_mode_deny: false", "              failure_mode_denied: false", `unknown field "failure_mode_denied"`},
		{"a domain the rules do not have fails", rlsEnvoy, "domain: edge", "domain: egde", `domain "egde" is not a domain`},
		{"a rate limit cluster that is not defined fails", rlsEnvoy, "envoy_grpc: {cluster_name: meshlimit_rls}", "envoy_grpc: {cluster_name: ratelimit}", `cluster "ratelimit" is not a cluster`},
		{"a rate limit cluster without HTTP/2 fails", rlsEnvoy, "http2_protocol_options: {}", "http_protocol_options: {}", "must use HTTP/2"},
		{"a descriptor that matches no limit fails", rlsEnvoy, "descriptor_key: api_key, skip_if_absent: true", "descriptor_key: apikey, skip_if_absent: true", "matches no limit"},
		{"a nested descriptor without its parent's rule fails", rlsEnvoy, "descriptor_key: route, descriptor_value: search", "descriptor_key: route, descriptor_value: find", "matches no limit"},
		{"the V2 transport fails", rlsEnvoy, "transport_api_version: V3", "transport_api_version: AUTO", "speaks V3"},
		{"a bad unit in the rules fails", rlsConfig, "unit: minute", "unit: minutes", `edge.yaml:14:13: descriptors[1].rate_limit.unit: invalid unit "minutes"`},
		{"a ConfigMap that drifts from config/ fails", rlsIstio, "requests_per_unit: 20", "requests_per_unit: 25", "edge.yaml differs"},
		{"an EnvoyFilter cluster that is not the Service's gRPC port fails", rlsIstio, "outbound|8082||meshlimit-rls", "outbound|8081||meshlimit-rls", "the Service's gRPC port"},
		{"a Service port not declared as gRPC fails", rlsIstio, "- name: grpc-rls\n    appProtocol: grpc", "- name: rls", "declare it gRPC"},
		{"a config directory that is not the ConfigMap's mount fails", rlsIstio, "value: /etc/meshlimit/ratelimit", "value: /etc/meshlimit/rls", "is not the mount of a ConfigMap"},
		{"a misspelled EnvoyFilter field fails", rlsIstio, "workloadSelector:", "workloadSelectors:", `unknown field "workloadSelectors"`},
		{"a misspelled field in a patched filter fails", rlsIstio, "failure_mode_deny: false", "failure_mode_denied: false", `unknown field "failure_mode_denied"`},
		{"a patched action that matches no limit fails", rlsIstio, "descriptor_key: api_key", "descriptor_key: key", "matches no limit"},
		{"a misspelled Deployment field fails", rlsIstio, "mountPath:", "mountPoint:", `unknown field "mountPoint"`},

		{"a misspelled field of a quota route fails", rlsQuotaRouting, "apply_on_stream_done: true", "apply_on_stream_end: true", `unknown field "apply_on_stream_end"`},
		{"a header filled from another filter's dynamic metadata fails", rlsQuotaRouting,
			"%DYNAMIC_METADATA(envoy.filters.http.ratelimit:", "%DYNAMIC_METADATA(envoy.filters.http.ext_authz:", "the rate limit filter writes envoy.filters.http.ratelimit"},
		{"a header read where the rules' metadata has nothing fails", rlsQuotaRouting,
			"metadata:backend_with_quota:name)%", "metadata:backend:name)%", "metadata has no string at backend.name"},
		{"a client's own header kept fails", rlsQuotaRouting, "- remove: x-backend-with-quota", "- remove: x-backend", "remove the client's own x-backend-with-quota"},
		{"a quota route without its header_mutation filter fails", rlsQuotaRouting,
			"- name: envoy.filters.http.header_mutation", "- name: envoy.filters.http.header_mutations", "then envoy.filters.http.header_to_metadata before the router"},
		{"a request descriptor that charges fails", rlsQuotaRouting, "hits_addend: {number: 0}", "hits_addend: {number: 1}", "charges every backend on every request"},
		{"a backend rule without quota_mode fails", rlsBackends, "quota_mode: true", "quota_mode: false", "must set quota_mode"},
		{"a backend no endpoint serves fails", rlsQuotaRouting, "envoy.lb: {backend: overflow}", "envoy.lb: {backend: spare}", `backend "overflow": no endpoint of cluster "backends"`},
		{"an envoy.lb key no subset selector has fails", rlsQuotaRouting, "key: backend, type: STRING", "key: pool, type: STRING", "no subset selector has keys [pool]"},
		{"a header copied into another namespace fails", rlsQuotaRouting, "metadata_namespace: envoy.lb", "metadata_namespace: envoy.lbx", "the subset load balancer reads envoy.lb"},
		{"a subset load balancer without a fallback fails", rlsQuotaRouting, "fallback_policy: DEFAULT_SUBSET", "fallback_policy: NO_FALLBACK", "would find no endpoint"},
		{"charging on stream done another header than the routed one fails", rlsQuotaRouting,
			"header_name: x-backend-with-quota", "header_name: x-backend", "no rate limit with apply_on_stream_done charges the backend"},
		{"a quota rule whose metadata lost the backend's name fails", rlsBackends, "        name: overflow\n", "        id: overflow\n", "metadata has no string at backend_with_quota.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := all(b.with(t, tc.path, tc.old, tc.new))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

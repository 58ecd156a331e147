package envoy

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	// The router's typed config is resolved through the registry, like the blank imports
	// above; its package is named here for the test of the filter order.
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"

	"github.com/meshlimit/meshlimit/rules"
)

// What envoy.yaml must say about the module, and what compose.yaml mounts.
const (
	wantVMID     = "meshlimit"
	wantRuntime  = "envoy.wasm.runtime.v8"
	wasmFilter   = "envoy.filters.http.wasm"
	routerFilter = "envoy.filters.http.router"
)

// decodeBootstrap decodes an Envoy bootstrap in YAML the way Envoy's own loader does: to
// JSON, then protojson into the v3 Bootstrap, which rejects unknown fields and resolves
// every typed_config Any through the protobuf registry (a type nobody imported fails).
func decodeBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	j, err := yamlToJSON(data)
	if err != nil {
		return nil, err
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(j, &bs); err != nil {
		return nil, err
	}
	return &bs, nil
}

// validBootstrap decodes the bootstrap at path p of b and validates it deeply.
func validBootstrap(b bundle, p string) (*bootstrapv3.Bootstrap, error) {
	data, err := b.file(p)
	if err != nil {
		return nil, err
	}
	bs, err := decodeBootstrap(data)
	if err != nil {
		return nil, err
	}
	if err := validateDeep(bs); err != nil {
		return nil, err
	}
	return bs, nil
}

// validateDeep runs the protoc-gen-validate rules of m and, since those stop at a
// google.protobuf.Any, of every message packed in an Any anywhere below it.
func validateDeep(m proto.Message) error {
	var errs []error
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, err)
		}
	}
	eachAny(m.ProtoReflect(), func(a *anypb.Any) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
			return
		}
		if err := validateDeep(inner); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
		}
	})
	return errors.Join(errs...)
}

// eachAny calls f for every Any below m, not descending into the Anys themselves.
func eachAny(m protoreflect.Message, f func(*anypb.Any)) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		visit := func(v protoreflect.Value) {
			msg := v.Message()
			if a, ok := msg.Interface().(*anypb.Any); ok {
				f(a)
				return
			}
			eachAny(msg, f)
		}
		switch {
		case fd.Message() == nil:
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				visit(v.List().Get(i))
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					visit(mv)
					return true
				})
			}
		default:
			visit(v)
		}
		return true
	})
}

// connectionManagers returns every HTTP connection manager of the bootstrap's listeners.
func connectionManagers(bs *bootstrapv3.Bootstrap) ([]*hcmv3.HttpConnectionManager, error) {
	var out []*hcmv3.HttpConnectionManager
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().MessageIs(&hcm) {
					if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
						return nil, err
					}
					out = append(out, &hcm)
				}
			}
		}
	}
	return out, nil
}

// wasmPlugins returns the plugin configuration of every wasm HTTP filter.
func wasmPlugins(hcms []*hcmv3.HttpConnectionManager) ([]*wasmv3.PluginConfig, error) {
	var out []*wasmv3.PluginConfig
	for _, hcm := range hcms {
		for _, hf := range hcm.GetHttpFilters() {
			if hf.GetName() != wasmFilter {
				continue
			}
			var w wasmfilterv3.Wasm
			if err := hf.GetTypedConfig().UnmarshalTo(&w); err != nil {
				return nil, fmt.Errorf("%s: %w", wasmFilter, err)
			}
			out = append(out, w.GetConfig())
		}
	}
	return out, nil
}

func clusterByName(bs *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	for _, c := range bs.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

// checkBootstrap decodes envoy.yaml and runs go-control-plane's generated validation on it
// and on every typed config inside it; then checks what Envoy checks at start-up beyond
// the schema: routes go to defined clusters, and the router is the last HTTP filter.
func checkBootstrap(b bundle) error {
	bs, err := validBootstrap(b, "envoy.yaml")
	if err != nil {
		return err
	}
	hcms, err := connectionManagers(bs)
	if err != nil {
		return err
	}
	if len(hcms) == 0 {
		return errors.New("no HTTP connection manager")
	}
	var errs []error
	for _, hcm := range hcms {
		if err := checkPathNormalization(hcm); err != nil {
			errs = append(errs, err)
		}
		filters := hcm.GetHttpFilters()
		if n := len(filters); n == 0 || !filters[n-1].GetTypedConfig().MessageIs(&routerv3.Router{}) {
			errs = append(errs, fmt.Errorf("%s: the last HTTP filter must be the router (%s)", hcm.GetStatPrefix(), routerFilter))
		}
		for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if c := r.GetRoute().GetCluster(); c != "" && clusterByName(bs, c) == nil {
					errs = append(errs, fmt.Errorf("route %q goes to cluster %q, which is not defined", r.GetName(), c))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// checkPathNormalization requires Envoy's own path normalization, so that routes, filters and the
// upstream agree on one form of the path: normalize_path and merge_slashes on, and an escaped slash
// either redirected to its unescaped form or rejected.
func checkPathNormalization(hcm *hcmv3.HttpConnectionManager) error {
	var errs []error
	if !hcm.GetNormalizePath().GetValue() {
		errs = append(errs, errors.New("normalize_path must be true"))
	}
	if !hcm.GetMergeSlashes() {
		errs = append(errs, errors.New("merge_slashes must be true"))
	}
	switch a := hcm.GetPathWithEscapedSlashesAction(); a {
	case hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT, hcmv3.HttpConnectionManager_REJECT_REQUEST:
	default:
		errs = append(errs, fmt.Errorf("path_with_escaped_slashes_action %s lets %%2F through: want UNESCAPE_AND_REDIRECT or REJECT_REQUEST", a))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", hcm.GetStatPrefix(), err)
	}
	return nil
}

// checkEnvoyPlugin checks the wasm filter: the shared vm_id, the V8 runtime, a local module,
// a JSON configuration in a StringValue that rules.ParseConfig accepts, and that every
// cluster and route the configuration names exists in the bootstrap.
func checkEnvoyPlugin(b bundle) error {
	data, err := b.file("envoy.yaml")
	if err != nil {
		return err
	}
	bs, err := decodeBootstrap(data)
	if err != nil {
		return err
	}
	hcms, err := connectionManagers(bs)
	if err != nil {
		return err
	}
	plugins, err := wasmPlugins(hcms)
	if err != nil {
		return err
	}
	if len(plugins) == 0 {
		return fmt.Errorf("no %s filter", wasmFilter)
	}
	routes := map[string]bool{}
	for _, hcm := range hcms {
		for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				routes[r.GetName()] = true
			}
		}
	}
	var errs []error
	for _, p := range plugins {
		if err := checkPluginConfig(p, bs, routes); err != nil {
			errs = append(errs, fmt.Errorf("plugin %q: %w", p.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

func checkPluginConfig(p *wasmv3.PluginConfig, bs *bootstrapv3.Bootstrap, routes map[string]bool) error {
	var errs []error
	vm := p.GetVmConfig()
	if vm.GetVmId() != wantVMID {
		errs = append(errs, fmt.Errorf("vm_id %q: want %q, shared by every filter instance that counts together", vm.GetVmId(), wantVMID))
	}
	if vm.GetRuntime() != wantRuntime {
		errs = append(errs, fmt.Errorf("runtime %q: want %q", vm.GetRuntime(), wantRuntime))
	}
	if vm.GetCode().GetLocal().GetFilename() == "" {
		errs = append(errs, errors.New("vm_config.code: want local.filename"))
	}
	if p.GetFailOpen() || p.GetFailurePolicy() == wasmv3.FailurePolicy_FAIL_OPEN {
		errs = append(errs, errors.New("the plugin fails open: envoy.yaml is meant to fail closed"))
	}
	var sv wrapperspb.StringValue
	if !p.GetConfiguration().MessageIs(&sv) {
		return errors.Join(append(errs, fmt.Errorf("configuration is a %s: want a google.protobuf.StringValue holding JSON, as Istio sends it", p.GetConfiguration().GetTypeUrl()))...)
	}
	if err := p.GetConfiguration().UnmarshalTo(&sv); err != nil {
		return errors.Join(append(errs, err)...)
	}
	config := []byte(sv.GetValue())
	c, err := rules.ParseConfig(config)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if c.Global != nil && clusterByName(bs, c.Global.Cluster) == nil {
		errs = append(errs, fmt.Errorf("global.cluster %q is not a cluster of the bootstrap", c.Global.Cluster))
	}
	names, err := pluginRoutes(config)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, n := range names {
		if !routes[n] {
			errs = append(errs, fmt.Errorf("route name %q is not a route of the bootstrap (routes: %v)", n, sortedKeys(routes)))
		}
	}
	return errors.Join(errs...)
}

// envoyPluginConfig returns envoy.yaml's plugin configuration, parsed.
func envoyPluginConfig(b bundle) (*rules.Config, error) {
	data, err := b.file("envoy.yaml")
	if err != nil {
		return nil, err
	}
	bs, err := decodeBootstrap(data)
	if err != nil {
		return nil, err
	}
	hcms, err := connectionManagers(bs)
	if err != nil {
		return nil, err
	}
	plugins, err := wasmPlugins(hcms)
	if err != nil {
		return nil, err
	}
	if len(plugins) == 0 {
		return nil, fmt.Errorf("no %s filter", wasmFilter)
	}
	var sv wrapperspb.StringValue
	if err := plugins[0].GetConfiguration().UnmarshalTo(&sv); err != nil {
		return nil, err
	}
	return rules.ParseConfig([]byte(sv.GetValue()))
}

// wasmModulePath returns the module file of envoy.yaml's wasm filter, for compose_test.go.
func wasmModulePath(bs *bootstrapv3.Bootstrap) (string, error) {
	hcms, err := connectionManagers(bs)
	if err != nil {
		return "", err
	}
	plugins, err := wasmPlugins(hcms)
	if err != nil {
		return "", err
	}
	if len(plugins) == 0 {
		return "", fmt.Errorf("no %s filter", wasmFilter)
	}
	return plugins[0].GetVmConfig().GetCode().GetLocal().GetFilename(), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestShippedExamplesShowALocalAndAGlobalRule keeps the examples what the README promises:
// envoy.yaml and the WasmPlugin each have a local rule and a rule counted by the service.
func TestShippedExamplesShowALocalAndAGlobalRule(t *testing.T) {
	b := loadBundle(t)

	envoyConfig, err := envoyPluginConfig(b)
	require.NoError(t, err)

	_, wp, err := loadWasmPlugin(b)
	require.NoError(t, err)
	j, err := pluginConfigJSON(wp.GetPluginConfig())
	require.NoError(t, err)
	istioConfig, err := rules.ParseConfig(j)
	require.NoError(t, err)

	for name, c := range map[string]*rules.Config{"envoy.yaml": envoyConfig, "wasmplugin.yaml": istioConfig} {
		scopes := map[rules.Scope]bool{}
		for _, r := range c.Rules() {
			scopes[r.Scope] = true
		}
		assert.True(t, scopes[rules.ScopeLocal], "%s: no local rule", name)
		assert.True(t, scopes[rules.ScopeGlobal], "%s: no global rule", name)
		require.NotNil(t, c.Global, name)
		assert.Equal(t, "/v1/check", c.Global.Path, "%s: the service's decision endpoint", name)
	}
}

package envoy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	networkingv1 "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/meshlimit/meshlimit/rules"
)

// istioObject is the envelope of an Istio resource; its spec is decoded with protojson
// into the istio.io/api message, which is what Istio's own validation starts from.
type istioObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

// decodeIstio decodes one Istio resource of the given apiVersion and kind, its spec into
// spec, rejecting unknown fields everywhere.
func decodeIstio(doc []byte, apiVersion, kind string, spec proto.Message) (*istioObject, error) {
	j, err := yamlToJSON(doc)
	if err != nil {
		return nil, err
	}
	var obj istioObject
	if err := decodeJSONStrict(j, &obj); err != nil {
		return nil, err
	}
	if obj.APIVersion != apiVersion || obj.Kind != kind {
		return nil, fmt.Errorf("%s %s: want %s %s", obj.APIVersion, obj.Kind, apiVersion, kind)
	}
	if obj.Metadata.Name == "" || obj.Metadata.Namespace == "" {
		return nil, fmt.Errorf("%s: metadata.name and metadata.namespace are required", kind)
	}
	if err := protojson.Unmarshal(obj.Spec, spec); err != nil {
		return nil, fmt.Errorf("%s %s/%s: spec: %w", kind, obj.Metadata.Namespace, obj.Metadata.Name, err)
	}
	return &obj, nil
}

const extensionsAPI = "extensions.istio.io/v1alpha1"

func loadWasmPlugin(b bundle) (*istioObject, *extensionsv1alpha1.WasmPlugin, error) {
	data, err := b.file("istio/wasmplugin.yaml")
	if err != nil {
		return nil, nil, err
	}
	var wp extensionsv1alpha1.WasmPlugin
	obj, err := decodeIstio(data, extensionsAPI, "WasmPlugin", &wp)
	return obj, &wp, err
}

func loadTrafficExtension(b bundle) (*istioObject, *extensionsv1alpha1.TrafficExtension, error) {
	data, err := b.file("istio/trafficextension.yaml")
	if err != nil {
		return nil, nil, err
	}
	var te extensionsv1alpha1.TrafficExtension
	obj, err := decodeIstio(data, extensionsAPI, "TrafficExtension", &te)
	return obj, &te, err
}

// pluginConfigJSON renders a pluginConfig Struct the way Istio hands it to Envoy: JSON in
// a StringValue (envoy-host.md §9).
func pluginConfigJSON(s *structpb.Struct) ([]byte, error) {
	if s == nil {
		return nil, errors.New("no pluginConfig")
	}
	return protojson.Marshal(s)
}

// checkModule checks the fields every meshlimit plugin resource must set, whichever CRD
// carries them.
func checkModule(rawURL, pluginName string, config *structpb.Struct) (*rules.Config, error) {
	var errs []error
	if u, err := url.Parse(rawURL); err != nil || u.Scheme != "oci" || u.Host == "" {
		errs = append(errs, fmt.Errorf("url %q: want oci://REGISTRY/REPOSITORY:TAG, the image make image writes", rawURL))
	}
	if pluginName == "" {
		errs = append(errs, errors.New("pluginName (the root_id) is required"))
	}
	j, err := pluginConfigJSON(config)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	c, err := rules.ParseConfig(j)
	if err != nil {
		return nil, errors.Join(append(errs, fmt.Errorf("pluginConfig: %w", err))...)
	}
	return c, errors.Join(errs...)
}

// checkWasmPlugin decodes the WasmPlugin into istio.io/api's type and its pluginConfig
// with rules.ParseConfig, and checks the choices its comments explain.
func checkWasmPlugin(b bundle) error {
	_, wp, err := loadWasmPlugin(b)
	if err != nil {
		return err
	}
	_, err = checkModule(wp.GetUrl(), wp.GetPluginName(), wp.GetPluginConfig())
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if len(wp.GetSelector().GetMatchLabels()) == 0 && len(wp.GetTargetRefs()) == 0 {
		errs = append(errs, errors.New("no selector or targetRefs: the plugin would apply to every workload of its namespace"))
	}
	if wp.GetType() == extensionsv1alpha1.PluginType_NETWORK {
		errs = append(errs, errors.New("type NETWORK: meshlimit is an HTTP filter"))
	}
	if wp.GetPhase() != extensionsv1alpha1.PluginPhase_AUTHZ {
		errs = append(errs, fmt.Errorf("phase %s: want AUTHZ", wp.GetPhase()))
	}
	return errors.Join(errs...)
}

// checkTrafficExtension decodes the TrafficExtension into istio.io/api's type and checks
// that it configures the same plugin as the WasmPlugin, field by field.
func checkTrafficExtension(b bundle) error {
	wpObj, wp, err := loadWasmPlugin(b)
	if err != nil {
		return err
	}
	teObj, te, err := loadTrafficExtension(b)
	if err != nil {
		return err
	}
	w := te.GetWasm()
	if w == nil {
		return errors.New("spec.wasm is required")
	}
	var errs []error
	if _, err := checkModule(w.GetUrl(), w.GetPluginName(), w.GetPluginConfig()); err != nil {
		errs = append(errs, err)
	}
	same := func(field string, ok bool) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s differs from the WasmPlugin's", field))
		}
	}
	same("metadata.namespace", teObj.Metadata.Namespace == wpObj.Metadata.Namespace)
	same("selector", proto.Equal(te.GetSelector(), wp.GetSelector()))
	same("targetRefs", slices.EqualFunc(te.GetTargetRefs(), wp.GetTargetRefs(), func(a, b2 *typev1beta1.PolicyTargetReference) bool { return proto.Equal(a, b2) }))
	same("phase", te.GetPhase().String() == wp.GetPhase().String())
	same("priority", proto.Equal(te.GetPriority(), wp.GetPriority()))
	same("match", len(te.GetMatch()) == len(wp.GetMatch()))
	same("wasm.url", w.GetUrl() == wp.GetUrl())
	same("wasm.sha256", w.GetSha256() == wp.GetSha256())
	same("wasm.imagePullPolicy", w.GetImagePullPolicy() == wp.GetImagePullPolicy())
	same("wasm.imagePullSecret", w.GetImagePullSecret() == wp.GetImagePullSecret())
	same("wasm.failStrategy", w.GetFailStrategy() == wp.GetFailStrategy())
	same("wasm.pluginName", w.GetPluginName() == wp.GetPluginName())
	same("wasm.pluginConfig", proto.Equal(w.GetPluginConfig(), wp.GetPluginConfig()))
	same("wasm.vmConfig", proto.Equal(w.GetVmConfig(), wp.GetVmConfig()))
	same("wasm.type", w.GetType() == wp.GetType())
	return errors.Join(errs...)
}

// k8sObjects is the decoded Kubernetes manifests of service.yaml and redis.yaml.
type k8sObjects struct {
	namespaces  []*corev1.Namespace
	deployments []*appsv1.Deployment
	services    []*corev1.Service
}

// loadKubernetes decodes every document of service.yaml, secret.yaml and redis.yaml strictly into its
// k8s.io/api type: an unknown or misspelled field is an error.
func loadKubernetes(b bundle) (*k8sObjects, error) {
	var objs k8sObjects
	var errs []error
	for _, path := range []string{"istio/service.yaml", "istio/secret.yaml", "istio/redis.yaml"} {
		data, err := b.file(path)
		if err != nil {
			return nil, err
		}
		for i, doc := range yamlDocs(data) {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				errs = append(errs, fmt.Errorf("%s document %d: %w", path, i+1, err))
				continue
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "v1 Namespace":
				ns := &corev1.Namespace{}
				objs.namespaces, obj = append(objs.namespaces, ns), ns
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				objs.deployments, obj = append(objs.deployments, d), d
			case "v1 Service":
				s := &corev1.Service{}
				objs.services, obj = append(objs.services, s), s
			case "v1 Secret":
				obj = &corev1.Secret{}
			default:
				errs = append(errs, fmt.Errorf("%s document %d: unexpected %s %s", path, i+1, head.APIVersion, head.Kind))
				continue
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				errs = append(errs, fmt.Errorf("%s document %d (%s): %w", path, i+1, head.Kind, err))
			}
		}
	}
	return &objs, errors.Join(errs...)
}

func (o *k8sObjects) deployment(name string) *appsv1.Deployment {
	for _, d := range o.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func (o *k8sObjects) service(namespace, name string) *corev1.Service {
	for _, s := range o.services {
		if s.Namespace == namespace && s.Name == name {
			return s
		}
	}
	return nil
}

// podsOf returns the Deployments whose pods a Service selects.
func (o *k8sObjects) podsOf(s *corev1.Service) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, d := range o.deployments {
		if d.Namespace != s.Namespace || len(s.Spec.Selector) == 0 {
			continue
		}
		match := true
		for k, v := range s.Spec.Selector {
			if d.Spec.Template.Labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, d)
		}
	}
	return out
}

// containerPort resolves a target port (a name or a number) in a pod template.
func containerPort(d *appsv1.Deployment, target intstr.IntOrString) (int32, bool) {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if (target.Type == intstr.String && p.Name == target.StrVal) || (target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// The decision service's contract with its manifests: the endpoints of service/handler.go
// and the environment variables compose.yaml and service.yaml set.
const (
	serviceDeployment = "meshlimit"
	readyPath         = "/readyz"
	healthPath        = "/healthz"
	envListen         = "MESHLIMIT_LISTEN"
	envRedis          = "MESHLIMIT_REDIS"
	envTimeout        = "MESHLIMIT_TIMEOUT"
)

// serviceDeadlineBelow checks that the service's own deadline per check (MESHLIMIT_TIMEOUT)
// is at most half the filter's call timeout, so the filter gets the service's answer even when
// the way back through a loaded proxy takes as long as the store did (service/API.md,
// "Deadlines").
func serviceDeadlineBelow(value string, c *rules.Config) error {
	d, err := time.ParseDuration(value)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", envTimeout, value, err)
	}
	if c.Global != nil && 2*d > c.Global.Timeout {
		return fmt.Errorf("%s=%s is more than half the plugin's global.timeout %s", envTimeout, d, c.Global.Timeout)
	}
	return nil
}

// checkKubernetes decodes the manifests strictly and checks that they fit together:
// selectors select, target ports exist, the namespace exists and has sidecar injection,
// the decision service has its probes, and its Redis address is a Service of redis.yaml.
func checkKubernetes(b bundle) error {
	objs, err := loadKubernetes(b)
	if err != nil {
		return err
	}
	var errs []error
	namespaces := map[string]*corev1.Namespace{}
	for _, ns := range objs.namespaces {
		namespaces[ns.Name] = ns
	}
	for _, d := range objs.deployments {
		if namespaces[d.Namespace] == nil {
			errs = append(errs, fmt.Errorf("deployment %s: namespace %q is not created by the manifests", d.Name, d.Namespace))
		}
		sel := d.Spec.Selector
		if sel == nil || len(sel.MatchLabels) == 0 {
			errs = append(errs, fmt.Errorf("deployment %s: no selector", d.Name))
			continue
		}
		for k, v := range sel.MatchLabels {
			if d.Spec.Template.Labels[k] != v {
				errs = append(errs, fmt.Errorf("deployment %s: selector %s=%s does not select its own pods", d.Name, k, v))
			}
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
				if probe == nil {
					continue
				}
				var port intstr.IntOrString
				switch {
				case probe.HTTPGet != nil:
					port = probe.HTTPGet.Port
				case probe.TCPSocket != nil:
					port = probe.TCPSocket.Port
				default:
					continue
				}
				if _, ok := containerPort(d, port); !ok {
					errs = append(errs, fmt.Errorf("deployment %s: a probe uses port %q, which the container lacks", d.Name, port.String()))
				}
			}
		}
	}
	for _, s := range objs.services {
		if namespaces[s.Namespace] == nil {
			errs = append(errs, fmt.Errorf("service %s: namespace %q is not created by the manifests", s.Name, s.Namespace))
		}
		pods := objs.podsOf(s)
		if len(pods) == 0 {
			errs = append(errs, fmt.Errorf("service %s: its selector selects no deployment", s.Name))
			continue
		}
		for _, p := range s.Spec.Ports {
			if _, ok := containerPort(pods[0], p.TargetPort); !ok {
				errs = append(errs, fmt.Errorf("service %s: target port %q is no container port of deployment %s", s.Name, p.TargetPort.String(), pods[0].Name))
			}
		}
	}
	if err := checkDecisionService(objs, namespaces); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func checkDecisionService(objs *k8sObjects, namespaces map[string]*corev1.Namespace) error {
	var d *appsv1.Deployment
	for _, x := range objs.deployments {
		if x.Name == serviceDeployment {
			d = x
		}
	}
	if d == nil {
		return fmt.Errorf("no deployment %q", serviceDeployment)
	}
	if ns := namespaces[d.Namespace]; ns != nil && ns.Labels["istio-injection"] != "enabled" {
		return fmt.Errorf("namespace %s: want label istio-injection=enabled, so that gateway-to-service calls are mutual TLS", ns.Name)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		return fmt.Errorf("deployment %s: want one container", d.Name)
	}
	c := d.Spec.Template.Spec.Containers[0]
	var errs []error
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != readyPath {
		errs = append(errs, fmt.Errorf("deployment %s: want an HTTP readiness probe on %s", d.Name, readyPath))
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != healthPath {
		errs = append(errs, fmt.Errorf("deployment %s: want an HTTP liveness probe on %s", d.Name, healthPath))
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if _, port, err := net.SplitHostPort(env[envListen]); err != nil || !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return strconv.Itoa(int(p.ContainerPort)) == port }) {
		errs = append(errs, fmt.Errorf("deployment %s: %s=%q does not listen on a container port", d.Name, envListen, env[envListen]))
	}
	for _, addr := range strings.Split(env[envRedis], ",") {
		if err := resolvesToService(objs, addr); err != nil {
			errs = append(errs, fmt.Errorf("deployment %s: %s: %w", d.Name, envRedis, err))
		}
	}
	return errors.Join(errs...)
}

// resolvesToService checks that addr is NAME.NAMESPACE.svc.cluster.local:PORT of a Service
// in the manifests with that port.
func resolvesToService(objs *k8sObjects, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	name, ns, ok := serviceHost(host)
	if !ok {
		return fmt.Errorf("%q: want NAME.NAMESPACE.svc.cluster.local:PORT", addr)
	}
	s := objs.service(ns, name)
	if s == nil {
		return fmt.Errorf("%q: no Service %s/%s", addr, ns, name)
	}
	if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == port }) {
		return fmt.Errorf("%q: Service %s/%s has no port %s", addr, ns, name, port)
	}
	return nil
}

// serviceHost splits a Kubernetes Service's cluster DNS name.
func serviceHost(host string) (name, namespace string, ok bool) {
	rest, found := strings.CutSuffix(host, ".svc.cluster.local")
	if !found {
		return "", "", false
	}
	name, namespace, ok = strings.Cut(rest, ".")
	return name, namespace, ok && name != "" && namespace != "" && !strings.Contains(namespace, ".")
}

// checkIstioCluster checks that the plugin's global cluster is the Istio cluster of the
// decision Service's port: outbound|PORT||NAME.NAMESPACE.svc.cluster.local (Istio's
// BuildSubsetKey, envoy-host.md §9), on a port Istio treats as HTTP.
func checkIstioCluster(b bundle) error {
	_, wp, err := loadWasmPlugin(b)
	if err != nil {
		return err
	}
	j, err := pluginConfigJSON(wp.GetPluginConfig())
	if err != nil {
		return err
	}
	c, err := rules.ParseConfig(j)
	if err != nil {
		return err
	}
	if c.Global == nil {
		return errors.New("no global object: the shipped WasmPlugin must show a global rule")
	}
	objs, err := loadKubernetes(b)
	if err != nil {
		return err
	}
	for _, d := range objs.deployments {
		if d.Name != serviceDeployment {
			continue
		}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == envTimeout {
				if err := serviceDeadlineBelow(e.Value, c); err != nil {
					return fmt.Errorf("service.yaml: %w", err)
				}
			}
		}
	}
	f := strings.Split(c.Global.Cluster, "|")
	if len(f) != 4 || f[0] != "outbound" || f[2] != "" {
		return fmt.Errorf("global.cluster %q: want outbound|PORT||HOST", c.Global.Cluster)
	}
	name, ns, ok := serviceHost(f[3])
	if !ok {
		return fmt.Errorf("global.cluster %q: want HOST = NAME.NAMESPACE.svc.cluster.local", c.Global.Cluster)
	}
	s := objs.service(ns, name)
	if s == nil {
		return fmt.Errorf("global.cluster %q: no Service %s/%s in service.yaml", c.Global.Cluster, ns, name)
	}
	for _, p := range s.Spec.Ports {
		if strconv.Itoa(int(p.Port)) != f[1] {
			continue
		}
		// Istio's protocol selection: appProtocol first, then the port name's prefix.
		proto := p.Name
		if p.AppProtocol != nil {
			proto = *p.AppProtocol
		}
		if proto != "http" && !strings.HasPrefix(proto, "http-") {
			return fmt.Errorf("global.cluster %q: Service port %d is %q, not HTTP", c.Global.Cluster, p.Port, proto)
		}
		return nil
	}
	return fmt.Errorf("global.cluster %q: Service %s/%s has no port %s", c.Global.Cluster, ns, name, f[1])
}

// istioRouteNames returns the Envoy route names Istio gives a VirtualService's HTTP routes:
// http[].name, followed by "." and the match's name for a named match (istio/istio
// pilot/pkg/networking/core/route/route.go, translateRoute).
func istioRouteNames(vs *networkingv1.VirtualService) []string {
	var names []string
	for _, h := range vs.GetHttp() {
		if len(h.GetMatch()) == 0 {
			names = append(names, h.GetName())
		}
		for _, m := range h.GetMatch() {
			if m.GetName() != "" {
				names = append(names, h.GetName()+"."+m.GetName())
			} else {
				names = append(names, h.GetName())
			}
		}
	}
	return names
}

// checkIstioRoutes decodes gateway.yaml into istio.io/api's Gateway and VirtualService and
// checks that every route name the WasmPlugin's rules match on is a route of a
// VirtualService bound to a Gateway on the workloads the WasmPlugin selects.
func checkIstioRoutes(b bundle) error {
	wpObj, wp, err := loadWasmPlugin(b)
	if err != nil {
		return err
	}
	data, err := b.file("istio/gateway.yaml")
	if err != nil {
		return err
	}
	const networkingAPI = "networking.istio.io/v1"
	gateways := map[string]*networkingv1.Gateway{}
	var routes []string
	var errs []error
	for i, doc := range yamlDocs(data) {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return fmt.Errorf("gateway.yaml document %d: %w", i+1, err)
		}
		switch head.Kind {
		case "Gateway":
			var gw networkingv1.Gateway
			obj, err := decodeIstio(doc, networkingAPI, "Gateway", &gw)
			if err != nil {
				return err
			}
			gateways[obj.Metadata.Namespace+"/"+obj.Metadata.Name] = &gw
		case "VirtualService":
			var vs networkingv1.VirtualService
			obj, err := decodeIstio(doc, networkingAPI, "VirtualService", &vs)
			if err != nil {
				return err
			}
			for _, g := range vs.GetGateways() {
				if !strings.Contains(g, "/") {
					g = obj.Metadata.Namespace + "/" + g
				}
				gw := gateways[g]
				switch {
				case gw == nil:
					errs = append(errs, fmt.Errorf("VirtualService %s: gateway %s is not in gateway.yaml", obj.Metadata.Name, g))
				case wpObj.Metadata.Namespace != strings.Split(g, "/")[0] || !equalLabels(gw.GetSelector(), wp.GetSelector().GetMatchLabels()):
					errs = append(errs, fmt.Errorf("VirtualService %s: gateway %s does not run on the workloads the WasmPlugin selects", obj.Metadata.Name, g))
				default:
					routes = append(routes, istioRouteNames(&vs)...)
				}
			}
		default:
			return fmt.Errorf("gateway.yaml document %d: unexpected kind %q", i+1, head.Kind)
		}
	}
	j, err := pluginConfigJSON(wp.GetPluginConfig())
	if err != nil {
		return err
	}
	names, err := pluginRoutes(j)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !slices.Contains(routes, n) {
			errs = append(errs, fmt.Errorf("route name %q is not a route of the gateway's VirtualServices (routes: %v)", n, routes))
		}
	}
	return errors.Join(errs...)
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

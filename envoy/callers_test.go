package envoy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	securityv1beta1 "istio.io/api/security/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
)

const securityAPI = "security.istio.io/v1"

// callerPaths are the paths the filter calls on the decision service: all the policy may admit.
var callerPaths = []string{"/v1/check", "/v1/resets"}

// checkCallers checks that the decision service admits only the workloads that run the filter:
// an AuthorizationPolicy on its pods that ALLOWs, by mutual-TLS principal of the WasmPlugin's
// namespace and nothing wider, the filter's paths only; mutual TLS STRICT in its namespace; and
// a Deployment that refuses to start without the secret, with no admin token from that secret.
func checkCallers(b bundle) error {
	data, err := b.file("istio/authorizationpolicy.yaml")
	if err != nil {
		return err
	}
	objs, err := loadKubernetes(b)
	if err != nil {
		return err
	}
	wpObj, _, err := loadWasmPlugin(b)
	if err != nil {
		return err
	}
	d := objs.deployment(serviceDeployment)
	if d == nil {
		return fmt.Errorf("no deployment %q", serviceDeployment)
	}
	var errs []error
	var policies, strict int
	for i, doc := range yamlDocs(data) {
		var head istioObject
		if j, err := yamlToJSON(doc); err == nil {
			_ = decodeJSONStrict(j, &head)
		}
		switch head.Kind {
		case "AuthorizationPolicy":
			var ap securityv1beta1.AuthorizationPolicy
			obj, err := decodeIstio(doc, securityAPI, head.Kind, &ap)
			if err == nil {
				err = checkPolicy(obj, &ap, d, wpObj.Metadata.Namespace)
			}
			errs, policies = append(errs, err), policies+1
		case "PeerAuthentication":
			var pa securityv1beta1.PeerAuthentication
			obj, err := decodeIstio(doc, securityAPI, head.Kind, &pa)
			if err == nil && obj.Metadata.Namespace == d.Namespace && pa.GetSelector() == nil && pa.GetMtls().GetMode() == securityv1beta1.PeerAuthentication_MutualTLS_STRICT {
				strict++
			}
			errs = append(errs, err)
		default:
			errs = append(errs, fmt.Errorf("authorizationpolicy.yaml document %d: unexpected kind %q", i+1, head.Kind))
		}
	}
	if policies == 0 {
		errs = append(errs, errors.New("no AuthorizationPolicy: any workload of the mesh can charge or reset any key"))
	}
	if strict == 0 {
		errs = append(errs, fmt.Errorf("no namespace-wide STRICT PeerAuthentication in %s: a plaintext caller has no principal to check", d.Namespace))
	}
	return errors.Join(append(errs, checkSecretRequired(d))...)
}

// checkPolicy checks one AuthorizationPolicy of the decision service.
func checkPolicy(obj *istioObject, ap *securityv1beta1.AuthorizationPolicy, d *appsv1.Deployment, pluginNS string) error {
	name := "AuthorizationPolicy " + obj.Metadata.Name
	var errs []error
	if obj.Metadata.Namespace != d.Namespace {
		errs = append(errs, fmt.Errorf("%s: namespace %s, not the service's %s", name, obj.Metadata.Namespace, d.Namespace))
	}
	sel := ap.GetSelector().GetMatchLabels()
	if len(sel) == 0 {
		errs = append(errs, fmt.Errorf("%s: no selector", name))
	}
	for k, v := range sel {
		if d.Spec.Template.Labels[k] != v {
			errs = append(errs, fmt.Errorf("%s: selector %s=%s does not select the service's pods", name, k, v))
		}
	}
	if ap.GetAction() != securityv1beta1.AuthorizationPolicy_ALLOW || len(ap.GetRules()) == 0 {
		errs = append(errs, fmt.Errorf("%s: want action ALLOW with rules (a policy without rules admits nothing, a DENY policy leaves the rest open)", name))
	}
	prefix := "cluster.local/ns/" + pluginNS + "/sa/"
	for i, r := range ap.GetRules() {
		if len(r.GetFrom()) == 0 || len(r.GetTo()) == 0 {
			errs = append(errs, fmt.Errorf("%s: rules[%d]: want from and to: without them it admits every caller or every path", name, i))
		}
		for _, f := range r.GetFrom() {
			s := f.GetSource()
			if len(s.GetPrincipals()) == 0 || len(s.GetNamespaces()) > 0 || len(s.GetIpBlocks()) > 0 || len(s.GetRemoteIpBlocks()) > 0 || len(s.GetRequestPrincipals()) > 0 {
				errs = append(errs, fmt.Errorf("%s: rules[%d]: want sources by principal only", name, i))
			}
			for _, p := range s.GetPrincipals() {
				if !strings.HasPrefix(p, prefix) || strings.Contains(p, "*") || len(p) == len(prefix) {
					errs = append(errs, fmt.Errorf("%s: rules[%d]: principal %q: want a service account of %s, where the WasmPlugin runs", name, i, p, pluginNS))
				}
			}
		}
		for _, to := range r.GetTo() {
			paths := to.GetOperation().GetPaths()
			if len(paths) == 0 || slices.ContainsFunc(paths, func(p string) bool { return !slices.Contains(callerPaths, p) }) {
				errs = append(errs, fmt.Errorf("%s: rules[%d]: paths %v: want only the filter's %v", name, i, paths, callerPaths))
			}
		}
	}
	return errors.Join(errs...)
}

// checkSecretRequired checks that the service refuses to start without its secret and takes no
// admin token from it.
func checkSecretRequired(d *appsv1.Deployment) error {
	var errs []error
	c := d.Spec.Template.Spec.Containers[0]
	var secretRef, adminRef string
	require := ""
	for _, e := range c.Env {
		ref := ""
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
		switch e.Name {
		case "MESHLIMIT_REQUIRE_SECRET":
			require = e.Value
		case "MESHLIMIT_SECRET":
			secretRef = ref
		case "MESHLIMIT_ADMIN_TOKEN":
			adminRef = ref
		}
	}
	if require != "true" {
		errs = append(errs, fmt.Errorf("deployment %s: MESHLIMIT_REQUIRE_SECRET=%q: want \"true\", so that a deployment without the secret does not start open", d.Name, require))
	}
	if adminRef != "" && adminRef == secretRef {
		errs = append(errs, fmt.Errorf("deployment %s: MESHLIMIT_ADMIN_TOKEN is read from the proxies' secret %s", d.Name, secretRef))
	}
	return errors.Join(errs...)
}

package envoy

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/meshlimit/meshlimit/rules"
)

// The kustomize base and the overlay users edit (docs/deploy.md, step 4).
const (
	kustomizeBase    = "istio"
	kustomizeOverlay = "istio-overlay"
	overlayParams    = "istio-overlay/parameters.yaml"
)

// object is one rendered Kubernetes object, as generic JSON.
type object = map[string]any

// kustomize renders the kustomization in dir of the bundle with kustomize's API (the one
// kubectl apply -k runs), from an in-memory copy of the bundle, and returns the objects by
// "kind namespace/name".
func kustomize(b bundle, dir string) (map[string]object, error) {
	fs := filesys.MakeFsInMemory()
	for p, data := range b {
		if err := fs.WriteFile(path.Join("/", p), data); err != nil {
			return nil, err
		}
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, path.Join("/", dir))
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	out := map[string]object{}
	for _, r := range rm.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		var o object
		if err := json.Unmarshal(data, &o); err != nil {
			return nil, err
		}
		out[r.GetKind()+" "+r.GetNamespace()+"/"+r.GetName()] = o
	}
	return out, nil
}

// fileObjects returns the objects of the files a kustomization lists in resources, as
// kustomize must render them.
func fileObjects(b bundle, dir string) (map[string]object, error) {
	data, err := b.file(path.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, err
	}
	out := map[string]object{}
	for _, r := range k.Resources {
		data, err := b.file(path.Join(dir, r))
		if err != nil {
			return nil, err
		}
		for _, doc := range yamlDocs(data) {
			var o object
			if err := yaml.Unmarshal(doc, &o); err != nil {
				return nil, fmt.Errorf("%s: %w", r, err)
			}
			meta, _ := o["metadata"].(map[string]any)
			ns, _ := meta["namespace"].(string)
			name, _ := meta["name"].(string)
			out[fmt.Sprintf("%v %s/%s", o["kind"], ns, name)] = o
		}
	}
	return out, nil
}

// parameters is the overlay's parameters.yaml.
type parameters struct {
	ServiceImage string `json:"serviceImage"`
	PluginURL    string `json:"pluginURL"`
	Secret       string `json:"secret"`
}

// probe are parameters no manifest holds.
var probe = parameters{
	ServiceImage: "probe.invalid/meshlimit-service@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	PluginURL:    "oci://probe.invalid/meshlimit:probe",
	Secret:       "probe-secret",
}

// withProbeParameters returns a copy of b whose parameters.yaml sets probe, and probe.
func withProbeParameters(b bundle) (bundle, parameters, error) {
	data, err := b.file(overlayParams)
	if err != nil {
		return nil, parameters{}, err
	}
	for field, v := range map[string]string{"serviceImage": probe.ServiceImage, "pluginURL": probe.PluginURL, "secret": probe.Secret} {
		re := regexp.MustCompile(`(?m)^(\s*` + field + `:).*$`)
		if !re.Match(data) {
			return nil, parameters{}, fmt.Errorf("%s: no parameter %s", overlayParams, field)
		}
		data = re.ReplaceAll(data, []byte("${1} "+strconv.Quote(v)))
	}
	c := make(bundle, len(b))
	for k, v := range b {
		c[k] = v
	}
	c[overlayParams] = data
	return c, probe, nil
}

// at returns the value at a path of map keys and, for a list, "[name=X]" (the element whose
// name is X), or nil.
func at(o any, keys ...string) any {
	for _, k := range keys {
		if name, ok := strings.CutPrefix(k, "[name="); ok {
			name = strings.TrimSuffix(name, "]")
			list, _ := o.([]any)
			o = nil
			for _, e := range list {
				if m, _ := e.(map[string]any); m["name"] == name {
					o = m
				}
			}
			continue
		}
		m, _ := o.(map[string]any)
		o = m[k]
	}
	return o
}

// set sets the value at a path of at's form, creating maps on the way.
func set(o object, v any, keys ...string) {
	parent := at(o, keys[:len(keys)-1]...)
	if m, ok := parent.(map[string]any); ok {
		m[keys[len(keys)-1]] = v
	}
}

// The fields the overlay's parameters set, by object.
var (
	serviceImageField = []string{"spec", "template", "spec", "containers", "[name=meshlimit]", "image"}
	pluginURLField    = []string{"spec", "url"}
	secretField       = []string{"stringData", "secret"}
	pluginSecretField = []string{"spec", "pluginConfig", "global", "secret"}
)

const (
	serviceKey = "Deployment meshlimit/meshlimit"
	pluginKey  = "WasmPlugin istio-system/meshlimit"
	secretKey  = "Secret meshlimit/meshlimit-secret"
)

// checkKustomize checks the kustomize base and overlay: the base renders exactly the files it
// lists; the overlay renders the base with its parameters written where they belong and nothing
// else changed, and leaves parameters.yaml out; the service reads its secret from the Secret the
// overlay writes; and the rendered plugin configuration is one the filter accepts.
func checkKustomize(b bundle) error {
	base, err := kustomize(b, kustomizeBase)
	if err != nil {
		return err
	}
	files, err := fileObjects(b, kustomizeBase)
	if err != nil {
		return err
	}
	var errs []error
	if !reflect.DeepEqual(base, files) {
		errs = append(errs, fmt.Errorf("the base renders %v, not the objects of its files %v (or not as written)", sortedKeys(base), sortedKeys(files)))
	}
	if _, err := kustomize(b, kustomizeOverlay); err != nil {
		return errors.Join(append(errs, err)...) // as shipped
	}
	// Probe values, unlike the base's, show where each parameter lands.
	b, p, err := withProbeParameters(b)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	overlay, err := kustomize(b, kustomizeOverlay)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if _, ok := overlay["ConfigMap /meshlimit-parameters"]; ok {
		errs = append(errs, errors.New("the overlay applies its parameters ConfigMap: it must stay local (config.kubernetes.io/local-config)"))
	}
	for _, f := range []struct {
		key   string
		field []string
		want  string
	}{
		{serviceKey, serviceImageField, p.ServiceImage},
		{pluginKey, pluginURLField, p.PluginURL},
		{secretKey, secretField, p.Secret},
		{pluginKey, pluginSecretField, p.Secret},
	} {
		if got := at(overlay[f.key], f.field...); got != f.want {
			errs = append(errs, fmt.Errorf("the overlay's %s %s is %v: want the parameter %q", f.key, strings.Join(f.field, "."), got, f.want))
		}
	}
	// With the parameters put back to the base's values, the overlay is the base.
	for _, f := range []struct {
		key   string
		field []string
	}{{serviceKey, serviceImageField}, {pluginKey, pluginURLField}, {secretKey, secretField}} {
		if o := overlay[f.key]; o != nil {
			set(o, at(base[f.key], f.field...), f.field...)
		}
	}
	if g, _ := at(overlay[pluginKey], "spec", "pluginConfig", "global").(map[string]any); g != nil && at(base[pluginKey], pluginSecretField...) == nil {
		delete(g, "secret")
	}
	if !reflect.DeepEqual(base, overlay) {
		errs = append(errs, fmt.Errorf("the overlay changes more than its parameters:\n%s", diffObjects(base, overlay)))
	}
	if err := checkServiceSecret(base); err != nil {
		errs = append(errs, err)
	}
	if base["AuthorizationPolicy meshlimit/meshlimit-callers"] == nil {
		errs = append(errs, errors.New("the base renders no AuthorizationPolicy meshlimit/meshlimit-callers: any workload could call the decision service"))
	}
	if pc, ok := at(overlay[pluginKey], "spec", "pluginConfig").(map[string]any); ok {
		data, _ := json.Marshal(pc)
		if _, err := rules.ParseConfig(data); err != nil {
			errs = append(errs, fmt.Errorf("the overlay's pluginConfig: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkServiceSecret checks that the decision service reads MESHLIMIT_SECRET from a key of the
// Secret the manifests create.
func checkServiceSecret(objs map[string]object) error {
	ref, _ := at(objs[serviceKey], "spec", "template", "spec", "containers", "[name=meshlimit]", "env", "[name=MESHLIMIT_SECRET]", "valueFrom", "secretKeyRef").(map[string]any)
	if ref == nil {
		return fmt.Errorf("%s: MESHLIMIT_SECRET is not read from a Secret", serviceKey)
	}
	s := objs[fmt.Sprintf("Secret meshlimit/%v", ref["name"])]
	if s == nil {
		return fmt.Errorf("%s: MESHLIMIT_SECRET names Secret %v, which the manifests do not create", serviceKey, ref["name"])
	}
	if _, ok := at(s, "stringData", fmt.Sprint(ref["key"])).(string); !ok {
		return fmt.Errorf("%s: MESHLIMIT_SECRET names key %v, which Secret %v lacks", serviceKey, ref["key"], ref["name"])
	}
	return nil
}

// diffObjects names the objects that differ between a and b, with both versions.
func diffObjects(a, b map[string]object) string {
	var out []string
	for k := range merged(a, b) {
		if !reflect.DeepEqual(a[k], b[k]) {
			ja, _ := json.Marshal(a[k])
			jb, _ := json.Marshal(b[k])
			out = append(out, fmt.Sprintf("  %s:\n    base:    %s\n    overlay: %s", k, ja, jb))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func merged(a, b map[string]object) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

func TestTheOverlayWritesEachParameterWhereItBelongs(t *testing.T) {
	b := loadBundle(t)
	const (
		image = "registry.internal:5000/team/meshlimit-service@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		url   = "oci://registry.internal:5000/team/meshlimit:0.2.0"
	)
	b = b.with(t, overlayParams, "serviceImage: registry.example.com/meshlimit/meshlimit-service:0.1.0", "serviceImage: "+image)
	b = b.with(t, overlayParams, "pluginURL: oci://registry.example.com/meshlimit/meshlimit:0.1.0", "pluginURL: "+url)
	b = b.with(t, overlayParams, `secret: ""`, `secret: "3f2a9c"`)
	require.NoError(t, checkKustomize(b))
	objs, err := kustomize(b, kustomizeOverlay)
	require.NoError(t, err)
	assert.Equal(t, image, at(objs[serviceKey], serviceImageField...))
	assert.Equal(t, url, at(objs[pluginKey], pluginURLField...))
	assert.Equal(t, "3f2a9c", at(objs[secretKey], secretField...))
	assert.Equal(t, "3f2a9c", at(objs[pluginKey], pluginSecretField...), "the plugin sends the secret the service requires")
}

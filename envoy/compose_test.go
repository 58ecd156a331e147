package envoy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// composeFile is the part of the Compose specification compose.yaml uses. It is decoded
// strictly, so a field this struct does not know (a typo, or a new field) fails the check
// until the struct and the checks learn it.
type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Image string `json:"image,omitempty"`
	Build *struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build,omitempty"`
	Command     []string          `json:"command,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
	Volumes     []string          `json:"volumes,omitempty"`
	Ports       []string          `json:"ports,omitempty"`
	Expose      []string          `json:"expose,omitempty"`
	DependsOn   []string          `json:"depends_on,omitempty"`
}

// The Compose service names compose.yaml must use for what envoy.yaml and the checks expect.
const (
	composeEnvoy      = "envoy"
	composeDecision   = "meshlimit-service"
	decisionCluster   = "meshlimit_service"
	envoyConfigTarget = "/etc/envoy/envoy.yaml"
	builtModule       = "build/meshlimit.wasm" // where make wasm writes, from the repository root
	minEnvoyMinor     = 33                     // Envoy 1.33: the first with the WASI imports of Go's wasip1 modules
)

func loadCompose(b bundle) (*composeFile, error) {
	data, err := b.file("compose.yaml")
	if err != nil {
		return nil, err
	}
	var c composeFile
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("compose.yaml: %w", err)
	}
	return &c, nil
}

// volume splits a short-syntax volume SOURCE:TARGET[:MODE].
func volume(v string) (source, target string) {
	f := strings.Split(v, ":")
	if len(f) < 2 {
		return "", v
	}
	return f[0], f[1]
}

// published parses a short-syntax port [HOST_IP:]HOST_PORT:CONTAINER_PORT.
func published(p string) (hostIP string, hostPort, containerPort string) {
	f := strings.Split(p, ":")
	switch len(f) {
	case 3:
		return f[0], f[1], f[2]
	case 2:
		return "", f[0], f[1]
	}
	return "", "", p
}

var envoyImage = regexp.MustCompile(`^envoyproxy/envoy(?:-distroless)?:v1\.(\d+)(?:\.\d+|-latest)$`)

// checkCompose checks that compose.yaml runs what envoy.yaml expects: the bootstrap and the
// module mounted where envoy.yaml reads them, its ports published on the host's loopback,
// every DNS cluster's host a Compose service exposing that port, and the decision service
// built from the Dockerfile and configured like service.yaml.
func checkCompose(b bundle) error {
	c, err := loadCompose(b)
	if err != nil {
		return err
	}
	data, err := b.file("envoy.yaml")
	if err != nil {
		return err
	}
	bs, err := decodeBootstrap(data)
	if err != nil {
		return err
	}
	envoy, ok := c.Services[composeEnvoy]
	if !ok {
		return fmt.Errorf("no service %q", composeEnvoy)
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if m := envoyImage.FindStringSubmatch(envoy.Image); m == nil {
		fail("envoy image %q: want envoyproxy/envoy:v1.MINOR.PATCH", envoy.Image)
	} else if minor, _ := strconv.Atoi(m[1]); minor < minEnvoyMinor {
		fail("envoy image %q: want Envoy 1.%d or later", envoy.Image, minEnvoyMinor)
	}
	if i := slices.Index(envoy.Command, "-c"); i < 0 || i+1 >= len(envoy.Command) || envoy.Command[i+1] != envoyConfigTarget {
		fail("envoy command %q: want -c %s", envoy.Command, envoyConfigTarget)
	}

	mounts := map[string]string{} // target → source
	for _, v := range envoy.Volumes {
		src, dst := volume(v)
		mounts[dst] = src
	}
	if src := mounts[envoyConfigTarget]; path.Clean(src) != "envoy.yaml" {
		fail("envoy: %s is mounted from %q: want ./envoy.yaml", envoyConfigTarget, src)
	}
	module, err := wasmModulePath(bs)
	if err != nil {
		return err
	}
	if src, ok := mounts[module]; !ok {
		fail("envoy: nothing is mounted at %s, where envoy.yaml loads the module", module)
	} else if path.Join("envoy", src) != builtModule {
		fail("envoy: %s is mounted from %q: want ../%s, what make wasm builds", module, src, builtModule)
	}

	// Inside the container Envoy must listen on all addresses, or the published port cannot
	// reach it; the host side stays on loopback.
	ports := map[string]string{} // container port → host IP
	for _, p := range envoy.Ports {
		ip, hostPort, ctr := published(p)
		if hostPort != ctr {
			fail("envoy: port %q: publish each port as itself, as the README's URLs assume", p)
		}
		ports[ctr] = ip
	}
	addrs := []struct {
		what string
		ip   string
		port uint32
	}{{"admin", bs.GetAdmin().GetAddress().GetSocketAddress().GetAddress(), bs.GetAdmin().GetAddress().GetSocketAddress().GetPortValue()}}
	for _, l := range bs.GetStaticResources().GetListeners() {
		sa := l.GetAddress().GetSocketAddress()
		addrs = append(addrs, struct {
			what string
			ip   string
			port uint32
		}{"listener " + l.GetName(), sa.GetAddress(), sa.GetPortValue()})
	}
	for _, a := range addrs {
		port := strconv.Itoa(int(a.port))
		ip, ok := ports[port]
		switch {
		case !ok:
			fail("envoy: the %s's port %s is not published", a.what, port)
		case ip != "127.0.0.1":
			fail("envoy: port %s is published on %q: want 127.0.0.1, the host's loopback only", port, ip)
		}
		if a.ip != "0.0.0.0" {
			fail("envoy.yaml: the %s binds %s: in a container it must bind 0.0.0.0 for the published port to reach it", a.what, a.ip)
		}
	}

	// Every DNS cluster's host is a Compose service that exposes the cluster's port.
	for _, cl := range bs.GetStaticResources().GetClusters() {
		if t := cl.GetType(); t != clusterv3.Cluster_STRICT_DNS && t != clusterv3.Cluster_LOGICAL_DNS {
			continue
		}
		for _, le := range cl.GetLoadAssignment().GetEndpoints() {
			for _, lb := range le.GetLbEndpoints() {
				sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
				host, port := sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))
				s, ok := c.Services[host]
				switch {
				case !ok:
					fail("cluster %s: host %q is not a Compose service", cl.GetName(), host)
				case !slices.Contains(s.Expose, port):
					fail("cluster %s: Compose service %s does not expose port %s", cl.GetName(), host, port)
				}
				if !slices.Contains(envoy.DependsOn, host) {
					fail("envoy: depends_on lacks %s, the host of cluster %s", host, cl.GetName())
				}
				if cl.GetName() == decisionCluster && host != composeDecision {
					fail("cluster %s: host %q: want the Compose service %s", cl.GetName(), host, composeDecision)
				}
			}
		}
	}
	if err := checkComposeDecision(b, c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkComposeDecision checks the decision service of compose.yaml: built from the
// Dockerfile, listening on the port it exposes, its Redis a Compose service, and its
// environment the one service.yaml sets.
func checkComposeDecision(b bundle, c *composeFile) error {
	s, ok := c.Services[composeDecision]
	if !ok {
		return fmt.Errorf("no service %q", composeDecision)
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Build == nil || path.Clean(s.Build.Context) != ".." {
		fail("%s: want build.context .., the repository root", composeDecision)
	} else if rest, ok := strings.CutPrefix(s.Build.Dockerfile, "envoy/"); !ok || rest != "Dockerfile" {
		fail("%s: build.dockerfile %q: want envoy/Dockerfile", composeDecision, s.Build.Dockerfile)
	}
	if _, port, err := net.SplitHostPort(s.Environment[envListen]); err != nil || !slices.Contains(s.Expose, port) {
		fail("%s: %s=%q: want :PORT with PORT in expose %v", composeDecision, envListen, s.Environment[envListen], s.Expose)
	}
	for _, addr := range strings.Split(s.Environment[envRedis], ",") {
		host, port, err := net.SplitHostPort(addr)
		if r, ok := c.Services[host]; err != nil || !ok || !slices.Contains(r.Expose, port) {
			fail("%s: %s=%q: want HOST:PORT of a Compose service that exposes PORT", composeDecision, envRedis, addr)
		}
	}
	if v, ok := s.Environment[envTimeout]; ok {
		c, err := envoyPluginConfig(b)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := serviceDeadlineBelow(v, c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", composeDecision, err))
		}
	}
	objs, err := loadKubernetes(b)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	want := map[string]bool{}
	for _, d := range objs.deployments {
		if d.Name == serviceDeployment {
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				want[e.Name] = true
			}
		}
	}
	if got := sortedKeys(s.Environment); !slices.Equal(got, sortedKeys(want)) {
		fail("%s: environment %v: want the variables service.yaml sets, %v", composeDecision, got, sortedKeys(want))
	}
	return errors.Join(errs...)
}

// checkDockerfile checks the service's Dockerfile: a Go at least as new as the module
// requires, a build of cmd/meshlimit-service, the port the other files use, and a numeric
// user that Kubernetes' runAsNonRoot can verify.
func checkDockerfile(b bundle) error {
	data, err := b.file("Dockerfile")
	if err != nil {
		return err
	}
	var from, expose, user []string
	var builds bool
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			from = append(from, f[1])
		case "EXPOSE":
			expose = append(expose, f[1:]...)
		case "USER":
			user = f[1:]
		case "RUN":
			line := strings.Join(f[1:], " ")
			builds = builds || (strings.Contains(line, "go build") && strings.HasSuffix(line, " ./cmd/meshlimit-service"))
		}
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !builds {
		fail("no RUN go build ... ./cmd/meshlimit-service")
	}
	if len(from) == 0 || !strings.HasPrefix(from[0], "golang:") {
		fail("the first stage must be FROM golang:VERSION")
	} else if err := goAtLeast(strings.TrimPrefix(from[0], "golang:")); err != nil {
		fail("%s: %v", from[0], err)
	}
	if len(user) != 1 || !regexp.MustCompile(`^\d+(:\d+)?$`).MatchString(user[0]) {
		fail("USER %v: want a numeric UID[:GID]", user)
	}
	// The port everybody agrees on: compose's and service.yaml's listen address.
	c, err := loadCompose(b)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	_, port, _ := net.SplitHostPort(c.Services[composeDecision].Environment[envListen])
	if !slices.Equal(expose, []string{port}) {
		fail("EXPOSE %v: want %s, the port of %s in compose.yaml and service.yaml", expose, port, envListen)
	}
	return errors.Join(errs...)
}

// goAtLeast checks that a golang image tag's version is at least the go line of the
// repository's go.mod.
func goAtLeast(tag string) error {
	mod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindSubmatch(mod)
	t := regexp.MustCompile(`^(\d+)\.(\d+)`).FindStringSubmatch(tag)
	if m == nil || t == nil {
		return fmt.Errorf("cannot compare Go versions %q and go.mod", tag)
	}
	need := [2]int{atoi(string(m[1])), atoi(string(m[2]))}
	have := [2]int{atoi(t[1]), atoi(t[2])}
	if have[0] < need[0] || (have[0] == need[0] && have[1] < need[1]) {
		return fmt.Errorf("Go %s is older than go.mod's %d.%d", tag, need[0], need[1])
	}
	return nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestServiceReadsTheConfiguredEnvironment checks that the decision service's source reads
// the environment variables that compose.yaml and service.yaml set: by name, or as the variable of
// the flag of that name (cmd/meshlimit-service reads MESHLIMIT_ and the flag's name in capitals). It is skipped until
// cmd/meshlimit-service exists.
func TestServiceReadsTheConfiguredEnvironment(t *testing.T) {
	mains, _ := filepath.Glob(filepath.Join("..", "cmd", "meshlimit-service", "*.go"))
	if len(mains) == 0 {
		t.Skip("cmd/meshlimit-service has no Go files yet")
	}
	lib, _ := filepath.Glob(filepath.Join("..", "service", "*.go"))
	var src []byte
	for _, f := range append(mains, lib...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		src = append(src, data...)
	}
	for _, name := range []string{envListen, envRedis, envTimeout} {
		// The service reads MESHLIMIT_X by name, or as the environment variable of its flag -x.
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "MESHLIMIT_"), "_", "-"))
		reads := bytes.Contains(src, []byte(strconv.Quote(name))) ||
			(bytes.Contains(src, []byte(`"MESHLIMIT_"`)) && bytes.Contains(src, []byte(strconv.Quote(flag))))
		assert.True(t, reads, "compose.yaml and istio/service.yaml set %s, but the service never reads it", name)
	}
}

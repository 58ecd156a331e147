// Package depcheck states the module's import policy and checks a package graph against it, in the
// manner of the Go distribution's go/build deps_test.go. The policy is a table: for each package of
// the module (by path relative to the module; "/..." also matches sub-packages), the module packages
// (the same syntax) and third-party packages (each with its sub-packages) it may import directly.
// The standard library is allowed everywhere; what the table restricts is the module's own packages
// and third-party modules, so that imports go in one direction. Forbidden adds what must not be
// linked at all. The tables of docs/architecture.md that list the packages, what each may import,
// their layers, the imports confined to some files and what they must never link are generated
// from Policy, Confined and Forbidden by this package's tests (-update), which fail when the page
// and the policy disagree.
package depcheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Module is the module path the policy speaks of.
const Module = "github.com/meshlimit/meshlimit"

// Rule says what one package (or family, with a trailing "/...") may import besides the standard
// library: module packages relative to Module (a package, or a family with a trailing "/...") and
// third-party packages, each with its sub-packages.
type Rule struct {
	Package string
	Allow   []string
}

// Policy is the import policy of the module. A module package without a rule may import nothing of
// the module and no third-party package: every package has to be listed on purpose.
var Policy = []Rule{
	{"algorithms", nil},
	{"shed", nil},
	{"messages", nil}, // counts gRPC and WebSocket messages in stream bytes; standard library only
	{"internal/shedsim", []string{"shed"}},
	{"internal/fnv", nil},
	{"internal/sfv", nil},
	{"internal/siphash", nil},
	{"internal/sha256", nil},
	{"internal/ipaddr", nil},
	{"rules/body", nil},
	{"rules", []string{"algorithms", "shed", "wire", "rules/body", "internal/fnv", "internal/sfv", "internal/siphash", "internal/sha256", "internal/ipaddr"}},
	{"wire", []string{"algorithms", "internal/fnv"}},
	{"sharedstate", []string{"algorithms", "shed", "internal/fnv", "internal/siphash"}},
	{"abi", []string{"github.com/tetratelabs/proxy-wasm-go-sdk"}},
	{"filter", []string{"abi", "algorithms", "messages", "rules", "rules/body", "shed", "sharedstate", "wire", "internal/fnv", "github.com/tetratelabs/proxy-wasm-go-sdk"}},
	{"cmd/filter", []string{"abi", "filter", "github.com/tetratelabs/proxy-wasm-go-sdk"}},
	{"cmd/passthrough", []string{"abi", "github.com/tetratelabs/proxy-wasm-go-sdk"}},
	{"cmd/hostfloor", []string{"abi", "github.com/tetratelabs/proxy-wasm-go-sdk"}}, // the pass-through plus the allowed request's host calls
	// The service: its API and the Store contract; one package per store, the Redis client in the
	// Redis store only; the contract's test suite; the envoyproxy/ratelimit front and its YAML.
	{"service", []string{"algorithms", "wire", "service/tracing", "github.com/prometheus"}},
	{"service/memstore", []string{"service", "algorithms", "wire"}},
	{"service/redisstore", []string{"service", "algorithms", "wire", "internal/fnv", "internal/siphash", "github.com/redis/rueidis"}},
	{"service/storetest", []string{"service", "algorithms", "wire", "github.com/stretchr/testify"}},
	{"service/rls", []string{"service", "service/rlsconfig", "service/tracing", "algorithms", "internal/sfv", "google.golang.org/grpc", "google.golang.org/protobuf", "github.com/envoyproxy/go-control-plane", "github.com/prometheus"}},
	{"service/rlsconfig", []string{"algorithms", "go.yaml.in/yaml"}},
	// OpenTelemetry is imported by the tracing package only; the fronts start their spans through it.
	{"service/tracing", []string{"go.opentelemetry.io/otel", "go.opentelemetry.io/contrib/propagators/b3", "google.golang.org/grpc/metadata"}},
	{"cmd/meshlimit-service", []string{"service/...", "wire"}},
	{"cmd/meshlimit-admin", []string{"rules", "wire", "internal/pluginconfig"}}, // names keys as the filter does, from its configuration
	{"internal/pluginconfig", []string{"go.yaml.in/yaml"}},
	{"cmd/meshlimit-check", []string{"rules", "internal/pluginconfig"}}, // checks configurations with the filter's own decoder
	{"internal/envoyhost", []string{"github.com/tetratelabs/wazero"}},
	{"internal/redistest", []string{"github.com/stretchr/testify"}},
	{"internal/otlptest", []string{"github.com/stretchr/testify", "go.opentelemetry.io/proto/otlp", "google.golang.org/grpc", "google.golang.org/protobuf"}},
	{"internal/callgrind", nil}, // e2e's instruction counts (make bench-instructions)
	{"internal/depcheck", nil},
	{"internal/docscheck", nil},
	{"cmd/demo", []string{"internal/envoyhost", "messages", "service", "service/memstore", "rules", "wire"}}, // messages: counts what the streams section passed; rules, wire: the operator's admin reset names the key as the filter does
	{"cmd/mlplot", []string{"algorithms", "shed", "internal/shedsim", "deploy/observability"}},
	{"e2e", nil},
	{"deploy/observability", nil}, // the naming rules its tests check the dashboard and the alerts with
}

// Confined lists imports that a package may make in some of its files only: the filter reaches the
// host through its port (filter/host.go), which one file implements over the SDK and package abi.
var Confined = []Confinement{
	{"filter", "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm", []string{"host_sdk.go"}},
	{"filter", "abi", []string{"host.go", "host_sdk.go"}},
}

// Confinement says that Package may import Import (a module package relative to Module, or a
// third-party package; exactly that package, not its sub-packages) only in Files.
type Confinement struct {
	Package, Import string
	Files           []string
}

// Forbidden lists what a package must never import, even indirectly: the wasm filter must not link
// an HTTP stack or a Redis client, nor net/netip (its initialiser's unique.Make runs in every VM's
// start; internal/ipaddr parses client addresses instead), the service must not link the proxy-wasm side, and no part of the
// service but the Redis store links the Redis client.
var Forbidden = map[string][]string{
	"cmd/filter":        {"net/http", "net/netip", "github.com/redis/rueidis", "google.golang.org/grpc", "go.opentelemetry.io"},
	"service/...":       {Module + "/filter", Module + "/sharedstate", Module + "/rules", "github.com/tetratelabs/proxy-wasm-go-sdk"},
	"service":           {"github.com/redis/rueidis"},
	"service/memstore":  {"github.com/redis/rueidis"},
	"service/storetest": {"github.com/redis/rueidis"},
	"service/rls":       {"github.com/redis/rueidis"},
	"service/rlsconfig": {"github.com/redis/rueidis"},
}

// Package is what the checker needs to know of one package: its import path, its direct imports
// (with the file that makes each, when known), and its transitive dependencies.
type Package struct {
	ImportPath string
	Imports    map[string][]string // import path → files that import it
	Deps       []string
	Standard   bool
}

// Check returns one error per forbidden edge in pkgs, each naming the importing package, the imported
// one and why, sorted.
func Check(pkgs []Package) []string {
	var errs []string
	for _, p := range pkgs {
		rel, ok := strings.CutPrefix(p.ImportPath, Module+"/")
		if !ok || p.Standard {
			continue
		}
		errs = append(errs, checkDirect(p, rel)...)
		errs = append(errs, checkTransitive(p, rel)...)
	}
	sort.Strings(errs)
	return errs
}

func checkDirect(p Package, rel string) []string {
	rule, ok := ruleFor(rel)
	if !ok {
		return []string{fmt.Sprintf("%s: not in the import policy (internal/depcheck): add a rule for it", rel)}
	}
	var errs []string
	for imp, files := range p.Imports {
		if isStd(imp) || allowed(rule, imp) {
			continue
		}
		errs = append(errs, fmt.Sprintf("forbidden import %s -> %s (%s)", rel, trim(imp), strings.Join(files, ", ")))
	}
	return append(errs, checkConfined(p, rel)...)
}

// checkConfined returns one error per file that makes a confined import outside its files.
func checkConfined(p Package, rel string) []string {
	var errs []string
	for _, c := range Confined {
		if c.Package != rel {
			continue
		}
		for imp, files := range p.Imports {
			if trim(imp) != c.Import {
				continue
			}
			for _, f := range files {
				if !slices.Contains(c.Files, f) {
					errs = append(errs, fmt.Sprintf("forbidden import %s -> %s outside %s (%s)", rel, c.Import, strings.Join(c.Files, ", "), f))
				}
			}
		}
	}
	return errs
}

func checkTransitive(p Package, rel string) []string {
	var errs []string
	for pattern, banned := range Forbidden {
		if !matches(pattern, rel) {
			continue
		}
		for _, d := range p.Deps {
			for _, b := range banned {
				if d == b || strings.HasPrefix(d, b+"/") {
					errs = append(errs, fmt.Sprintf("forbidden dependency %s -> %s (via its imports)", rel, trim(d)))
				}
			}
		}
	}
	return errs
}

func ruleFor(rel string) (Rule, bool) {
	for _, r := range Policy {
		if matches(r.Package, rel) {
			return r, true
		}
	}
	return Rule{}, false
}

// matches reports whether rel is the package pattern, or under it when the pattern ends in "/...".
func matches(pattern, rel string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

func allowed(r Rule, imp string) bool {
	rel, inModule := strings.CutPrefix(imp, Module+"/")
	for _, a := range r.Allow {
		thirdParty := strings.Contains(strings.SplitN(a, "/", 2)[0], ".")
		switch {
		case inModule && !thirdParty && matches(a, rel):
			return true
		case !inModule && thirdParty && (imp == a || strings.HasPrefix(imp, strings.TrimSuffix(a, "/")+"/")):
			return true
		}
	}
	return false
}

// isStd reports whether an import path is of the standard library (no dot in its first element).
func isStd(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".")
}

func trim(imp string) string {
	if rel, ok := strings.CutPrefix(imp, Module+"/"); ok {
		return rel
	}
	return imp
}

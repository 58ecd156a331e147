package depcheck

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// listed is the part of `go list -json` the test reads.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Deps       []string
	Standard   bool
}

// load lists the packages matching patterns (with their dependencies) for the given GOOS/GOARCH and
// build tags, and reads each module package's imports file by file.
func load(t *testing.T, env []string, args ...string) []Package {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-json=ImportPath,Dir,GoFiles,Deps,Standard"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list %v", args)
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var l listed
		if err := dec.Decode(&l); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		p := Package{ImportPath: l.ImportPath, Deps: l.Deps, Standard: l.Standard, Imports: map[string][]string{}}
		for _, f := range l.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(l.Dir, f), nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, spec := range file.Imports {
				imp, _ := strconv.Unquote(spec.Path.Value)
				p.Imports[imp] = append(p.Imports[imp], f)
			}
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestTheModuleFollowsItsImportPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	native := load(t, nil, "./...")
	require.NotEmpty(t, native)
	assert.Empty(t, Check(native), "natively")

	wasm := load(t, []string{"GOOS=wasip1", "GOARCH=wasm"}, "-tags", "tinygo", "./abi/", "./filter/", "./sharedstate/", "./rules/...", "./cmd/filter/", "./cmd/passthrough/", "./cmd/hostfloor/")
	require.NotEmpty(t, wasm)
	assert.Empty(t, Check(wasm), "in the wasm build of the filter")
}

func TestCheckNamesEveryForbiddenEdge(t *testing.T) {
	pkg := func(rel string, imports map[string][]string, deps ...string) Package {
		return Package{ImportPath: Module + "/" + rel, Imports: imports, Deps: deps}
	}
	for _, tc := range []struct {
		name string
		pkg  Package
		want []string
	}{
		{"rules importing sharedstate is refused",
			pkg("rules", map[string][]string{Module + "/sharedstate": {"key.go"}, "strings": {"key.go"}}),
			[]string{"forbidden import rules -> sharedstate (key.go)"}},
		{"algorithms importing anything of the module is refused",
			pkg("algorithms", map[string][]string{Module + "/internal/fnv": {"bucket.go"}}),
			[]string{"forbidden import algorithms -> internal/fnv (bucket.go)"}},
		{"rules importing the SDK is refused",
			pkg("rules", map[string][]string{"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm": {"match.go"}}),
			[]string{"forbidden import rules -> github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm (match.go)"}},
		{"sharedstate importing the SDK is refused",
			pkg("sharedstate", map[string][]string{"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm": {"table.go"}}),
			[]string{"forbidden import sharedstate -> github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm (table.go)"}},
		{"the filter calling the SDK or abi outside its host port is refused",
			pkg("filter", map[string][]string{
				"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm":       {"host_sdk.go", "lease.go"},
				"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types": {"http.go"},
				Module + "/abi": {"host.go", "shed.go"}}),
			[]string{"forbidden import filter -> abi outside host.go, host_sdk.go (shed.go)",
				"forbidden import filter -> github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm outside host_sdk.go (lease.go)"}},
		{"the service importing the filter is refused, directly and through its dependencies",
			pkg("service", map[string][]string{Module + "/filter": {"handler.go"}}, Module+"/filter"),
			[]string{"forbidden dependency service -> filter (via its imports)", "forbidden import service -> filter (handler.go)"}},
		{"the memory store importing the Redis client is refused",
			pkg("service/memstore", map[string][]string{"github.com/redis/rueidis": {"memstore.go"}}, "github.com/redis/rueidis"),
			[]string{"forbidden dependency service/memstore -> github.com/redis/rueidis (via its imports)", "forbidden import service/memstore -> github.com/redis/rueidis (memstore.go)"}},
		{"the service linking the Redis client through the Redis store is refused",
			pkg("service/rls", map[string][]string{Module + "/service/redisstore": {"server.go"}}, Module+"/service/redisstore", "github.com/redis/rueidis"),
			[]string{"forbidden dependency service/rls -> github.com/redis/rueidis (via its imports)", "forbidden import service/rls -> service/redisstore (server.go)"}},
		{"a store importing the other store is refused, though both are the service's",
			pkg("service/memstore", map[string][]string{Module + "/service/redisstore": {"memstore.go"}}),
			[]string{"forbidden import service/memstore -> service/redisstore (memstore.go)"}},
		{"the Redis store importing the Redis client passes",
			pkg("service/redisstore", map[string][]string{"github.com/redis/rueidis": {"redisstore.go"}, Module + "/service": {"redisstore.go"}}, "github.com/redis/rueidis"),
			nil},
		{"the wasm filter linking net/http is refused",
			pkg("cmd/filter", map[string][]string{}, "net/http", "net/url"),
			[]string{"forbidden dependency cmd/filter -> net/http (via its imports)"}},
		{"a package missing from the policy is refused",
			pkg("newthing", nil),
			[]string{"newthing: not in the import policy (internal/depcheck): add a rule for it"}},
		{"allowed edges pass",
			pkg("filter", map[string][]string{Module + "/rules": {"http.go"}, "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm": {"host_sdk.go"}}),
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Check([]Package{tc.pkg}))
		})
	}
}

package abi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sdkModule = "github.com/tetratelabs/proxy-wasm-go-sdk"

// sdkFunc is one function the SDK marks with TinyGo's //export directive.
type sdkFunc struct {
	goName string   // e.g. ProxyGetSharedData or proxyOnTick
	wasm   string   // e.g. proxy_get_shared_data
	params []string // wasm value types of the parameters: "i32" or "i64"
}

// wasmType maps a Go parameter type, as the SDK or this package spells it, to the wasm value type it
// travels as. Pointers and every Word-sized integer are i32 in proxy-wasm; only 64-bit integers are i64.
func wasmType(t *testing.T, expr ast.Expr) string {
	t.Helper()
	switch e := expr.(type) {
	case *ast.StarExpr:
		return "i32"
	case *ast.SelectorExpr: // unsafe.Pointer, types.PeerType, ...
		if e.Sel.Name == "Pointer" {
			return "i32"
		}
		return "i32"
	case *ast.Ident:
		switch e.Name {
		case "int64", "uint64":
			return "i64"
		case "int", "uint", "int32", "uint32", "bool", "LogLevel", "MapType", "BufferType", "StreamType", "MetricType":
			return "i32"
		}
	}
	t.Fatalf("unexpected parameter type %T %v", expr, expr)
	return ""
}

func paramTypes(t *testing.T, ft *ast.FuncType) []string {
	var out []string
	for _, f := range ft.Params.List {
		n := len(f.Names)
		if n == 0 {
			n = 1
		}
		for range n {
			out = append(out, wasmType(t, f.Type))
		}
	}
	return out
}

// directive returns the argument of the //go:NAME or //export directive in a function's doc comment.
func directive(fd *ast.FuncDecl, prefix string) (string, bool) {
	if fd.Doc == nil {
		return "", false
	}
	for _, c := range fd.Doc.List {
		if rest, ok := strings.CutPrefix(c.Text, prefix); ok {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

func parseFuncs(t *testing.T, files []string) []*ast.FuncDecl {
	t.Helper()
	fset := token.NewFileSet()
	var out []*ast.FuncDecl
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				out = append(out, fd)
			}
		}
	}
	return out
}

// sdkExports reads the SDK's own declarations from the module cache, so that an SDK upgrade that adds
// a host call or a callback makes this test fail until the binding covers it.
func sdkExports(t *testing.T) (hostCalls, callbacks []sdkFunc) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", sdkModule).Output()
	require.NoError(t, err, "go list -m %s", sdkModule)
	dir := filepath.Join(strings.TrimSpace(string(out)), "proxywasm", "internal")
	cbFiles, err := filepath.Glob(filepath.Join(dir, "abi_callback_*.go"))
	require.NoError(t, err)
	cbFiles = dropTests(cbFiles)
	collect := func(files []string) []sdkFunc {
		var fs []sdkFunc
		for _, fd := range parseFuncs(t, files) {
			if name, ok := directive(fd, "//export "); ok {
				fs = append(fs, sdkFunc{goName: fd.Name.Name, wasm: name, params: paramTypes(t, fd.Type)})
			}
		}
		return fs
	}
	return collect([]string{filepath.Join(dir, "abi_hostcalls.go")}), collect(cbFiles)
}

func dropTests(files []string) []string {
	var out []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			out = append(out, f)
		}
	}
	return out
}

// binding is what this package's wasip1 files declare.
type binding struct {
	imports   map[string]*ast.FuncDecl // Go name → //go:wasmimport env proxy_* declaration
	importOf  map[string]string        // Go name → wasm import name
	bodies    map[string]*ast.FuncDecl // SDK Go name → the function carrying its body (linkname push)
	pulls     map[string]string        // local name → SDK Go name (linkname pull, no body)
	exports   map[string]*ast.FuncDecl // wasm export name → declaration
	exportsOf map[string]string        // wasm export name → local Go name
}

func readBinding(t *testing.T) binding {
	t.Helper()
	files, err := filepath.Glob("*_wasip1.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	b := binding{map[string]*ast.FuncDecl{}, map[string]string{}, map[string]*ast.FuncDecl{}, map[string]string{}, map[string]*ast.FuncDecl{}, map[string]string{}}
	for _, fd := range parseFuncs(t, files) {
		if imp, ok := directive(fd, "//go:wasmimport "); ok {
			mod, name, _ := strings.Cut(imp, " ")
			if mod == "wasi_snapshot_preview1" {
				require.Equal(t, "clock_time_get", name, "the binding's only WASI import is the clock behind UnixNano")
				continue
			}
			require.Equal(t, "env", mod, "%s imports from %q", fd.Name.Name, mod)
			b.imports[fd.Name.Name], b.importOf[fd.Name.Name] = fd, name
		}
		if ln, ok := directive(fd, "//go:linkname "); ok {
			local, target, _ := strings.Cut(ln, " ")
			require.Equal(t, fd.Name.Name, local)
			pkg, sym, ok := strings.Cut(target, "/internal.")
			require.True(t, ok && pkg == sdkModule+"/proxywasm", "linkname target %q is not in the SDK's internal package", target)
			if fd.Body != nil {
				b.bodies[sym] = fd
			} else {
				b.pulls[local] = sym
			}
		}
		if exp, ok := directive(fd, "//go:wasmexport "); ok {
			b.exports[exp], b.exportsOf[exp] = fd, fd.Name.Name
		}
	}
	return b
}

// calledFuncs lists the plain function names a body calls.
func calledFuncs(fd *ast.FuncDecl) []string {
	var names []string
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if id, ok := call.Fun.(*ast.Ident); ok {
				names = append(names, id.Name)
			}
		}
		return true
	})
	return names
}

func TestEveryHostCallTheSDKDeclaresHasABodyThatCallsTheSameImport(t *testing.T) {
	hostCalls, _ := sdkExports(t)
	require.Len(t, hostCalls, 29, "SDK v0.24.0 declares 29 host calls; a different count means the SDK changed")
	b := readBinding(t)
	for _, hc := range hostCalls {
		t.Run(hc.wasm, func(t *testing.T) {
			body, ok := b.bodies[hc.goName]
			require.True(t, ok, "no //go:linkname body for the SDK's %s", hc.goName)
			assert.Equal(t, hc.params, paramTypes(t, body.Type), "the body's parameters must match the SDK's declaration")
			var imported []string
			for _, callee := range calledFuncs(body) {
				if name, ok := b.importOf[callee]; ok {
					imported = append(imported, name)
					assert.Equal(t, hc.params, paramTypes(t, b.imports[callee].Type), "wasm signature of %s", name)
				}
			}
			assert.Equal(t, []string{hc.wasm}, imported, "the body must call exactly the import the SDK names")
		})
	}
	assert.Len(t, b.bodies, len(hostCalls), "the binding defines host calls the SDK does not declare")
}

func TestEveryCallbackTheSDKExportsIsExportedUnderItsProxyWasmName(t *testing.T) {
	_, callbacks := sdkExports(t)
	require.Len(t, callbacks, 22, "SDK v0.24.0 exports 22 callbacks; a different count means the SDK changed")
	b := readBinding(t)
	var names []string
	for _, cb := range callbacks {
		names = append(names, cb.wasm)
		t.Run(cb.wasm, func(t *testing.T) {
			exp, ok := b.exports[cb.wasm]
			require.True(t, ok, "no //go:wasmexport %s", cb.wasm)
			assert.Equal(t, cb.params, paramTypes(t, exp.Type), "wasm parameters of %s", cb.wasm)
			var forwards []string
			for _, callee := range calledFuncs(exp) {
				if sym, ok := b.pulls[callee]; ok {
					forwards = append(forwards, sym)
				}
			}
			assert.Equal(t, []string{cb.goName}, forwards, "%s must forward to the SDK's %s", cb.wasm, cb.goName)
		})
	}
	assert.Contains(t, names, "proxy_on_memory_allocate")
	assert.Contains(t, names, "proxy_abi_version_0_2_0")
	var extra []string
	for name := range b.exports {
		if !contains(names, name) {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	assert.Empty(t, extra, "exports the SDK does not have")
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestTheBindingCompilesOnlyForStandardGoWasip1Builds(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "doc.go" || name == "host.go" {
			continue // portable: no host calls of their own
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.PackageClauseOnly)
		require.NoError(t, err)
		var constraint string
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if s, ok := strings.CutPrefix(c.Text, "//go:build "); ok {
					constraint = s
				}
			}
		}
		if strings.HasSuffix(name, "_other.go") { // the fallbacks of everything else
			assert.Equal(t, "!wasip1 || tinygo.wasm", constraint, "%s must build exactly where the binding does not", name)
			continue
		}
		assert.Equal(t, "wasip1 && !tinygo.wasm", constraint, "%s must build only for wasip1 and not under real TinyGo", name)
	}
}

// A host call that returns data re-enters the guest's allocator before it writes its results, and
// the allocator runs on the calling goroutine's stack, which it may grow (Go then moves the stack):
// a result written through a pointer into the stack would land at the stack's old address, and the
// call would seem to return nothing (the plugin configuration read as empty, after a deeper call
// chain moved the stack boundary). So every result of such a call (a ret* parameter of an import
// that has retData) goes through the package's out variables, never through a local's address or a
// pointer the caller passed in.
func TestNoHostCallThatReturnsDataWritesItsResultsIntoAStack(t *testing.T) {
	b := readBinding(t)
	resultParams := map[string][]int{} // import Go name → indices of its ret* parameters
	for name, fd := range b.imports {
		var idx []int
		hasData, i := false, 0
		for _, f := range fd.Type.Params.List {
			for _, n := range f.Names {
				if strings.HasPrefix(n.Name, "ret") {
					idx = append(idx, i)
				}
				hasData = hasData || n.Name == "retData"
				i++
			}
		}
		if hasData {
			resultParams[name] = idx
		}
	}
	require.NotEmpty(t, resultParams)
	files, err := filepath.Glob("*_wasip1.go")
	require.NoError(t, err)
	calls := 0
	for _, fd := range parseFuncs(t, files) {
		ast.Inspect(fd, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			id, ok := call.Fun.(*ast.Ident)
			if !ok {
				return true
			}
			idx, ok := resultParams[id.Name]
			if !ok {
				return true
			}
			calls++
			for _, i := range idx {
				assert.True(t, isOutField(call.Args[i]), "%s: argument %d of %s must be unsafe.Pointer(&out.<field>)", fd.Name.Name, i, id.Name)
			}
			return true
		})
	}
	assert.GreaterOrEqual(t, calls, len(resultParams), "every import that returns data is called")
}

// isOutField reports whether e is unsafe.Pointer(&out.<field>).
func isOutField(e ast.Expr) bool {
	conv, ok := e.(*ast.CallExpr)
	if !ok || len(conv.Args) != 1 {
		return false
	}
	addr, ok := conv.Args[0].(*ast.UnaryExpr)
	if !ok || addr.Op != token.AND {
		return false
	}
	sel, ok := addr.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "out"
}

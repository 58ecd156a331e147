package envoyhost_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// guests are the test modules under testdata, compiled once by TestMain.
var guests = map[string][]byte{}

// TestMain compiles the test guests with the standard toolchain
// (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared), in parallel. A missing toolchain or
// a failed build fails the run.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "envoyhost-guests")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	err = buildGuests(dir, "guest", "badimport")
	if err != nil {
		fmt.Fprintln(os.Stderr, "envoyhost tests: building guests:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildGuests(dir string, names ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("go toolchain not found: %w", err)
	}
	out, err := exec.Command(goBin, "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("go env GOROOT: %w", err)
	}
	goBin = filepath.Join(strings.TrimSpace(string(out)), "bin", "go")
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wasm := filepath.Join(dir, name+".wasm")
			cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", wasm, "./testdata/"+name)
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("%s: %w\n%s", name, err, stderr.String())
				return
			}
			errs[i] = nil
		}()
	}
	wg.Wait()
	for i, name := range names {
		if errs[i] != nil {
			return errs[i]
		}
		b, err := os.ReadFile(filepath.Join(dir, name+".wasm"))
		if err != nil {
			return err
		}
		guests[name] = b
	}
	// Compile the modules concurrently now; NewPlugin then finds them in the cache.
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = envoyhost.ModuleImports(context.Background(), guests[name])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newPlugin loads the named guest with cfg and closes it when the test ends.
func newPlugin(t testing.TB, guest string, cfg envoyhost.Config) *envoyhost.Plugin {
	t.Helper()
	p, err := envoyhost.NewPlugin(context.Background(), guests[guest], cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// op returns request headers that ask the guest for operation name, with extra
// header pairs.
func op(name string, kv ...string) envoyhost.Headers {
	h := envoyhost.Headers{{":method", "GET"}, {":path", "/ping?q=1"}, {":authority", "example.test"}, {":scheme", "http"}}
	if name != "" {
		h = append(h, [2]string{"x-op", name})
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h = append(h, [2]string{kv[i], kv[i+1]})
	}
	return h
}

var ok200 = &envoyhost.Response{Headers: envoyhost.Headers{{":status", "200"}}}

// roundTrip runs one request on vm and fails the test on a host error.
func roundTrip(t testing.TB, vm *envoyhost.VM, h envoyhost.Headers) envoyhost.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a safety net
	defer cancel()
	res, err := vm.RoundTrip(ctx, &envoyhost.Request{Headers: h}, ok200)
	require.NoError(t, err)
	return res
}

// replyHeader returns header name of the local reply, failing when there is none.
func replyHeader(t testing.TB, res envoyhost.Result, name string) string {
	t.Helper()
	require.NotNil(t, res.LocalReply, "want a local reply")
	v, _ := res.LocalReply.Headers.Get(name)
	return v
}

// t0ctx is the context of calls that need no deadline.
var t0ctx = context.Background()

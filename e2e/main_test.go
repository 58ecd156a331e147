package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// TestMain compiles the modules once, in parallel, before any test runs: wazero's compiler is the
// slowest part of these tests (about 10 s a module under the race detector), and the host caches what
// it compiled. A missing module fails every test that needs it, with the command that builds it.
func TestMain(m *testing.M) {
	var wg sync.WaitGroup
	for _, name := range []string{"meshlimit", "passthrough"} {
		b, err := os.ReadFile(filepath.Join("..", "build", name+".wasm"))
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := envoyhost.ModuleImports(context.Background(), b); err != nil {
				fmt.Fprintf(os.Stderr, "compiling %s.wasm: %v\n", name, err)
			}
		}()
	}
	wg.Wait()
	os.Exit(m.Run())
}

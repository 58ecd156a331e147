package rlsconfig

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to the loader: it must return a Config or an *Error, never
// panic, and a loaded Config must answer Match for entries drawn from the input.
func FuzzLoad(f *testing.F) {
	paths, _ := filepath.Glob("testdata/good/*.yaml")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "key", "value")
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: '*a*'\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), "k", "xay")
	f.Add([]byte("a: &a [*a]"), "", "")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		if len(data) > 1<<16 {
			return
		}
		c, err := Load([]File{{Name: "f.yaml", Data: data}})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("not an *Error: %v", err)
			}
			return
		}
		for _, d := range c.Domains() {
			es := []Entry{{key, value}, {key, value}}
			for n := 0; n <= len(es); n++ {
				c.Match(d, n, func(i int) Entry { return es[i] })
				c.MetricName(d, n, func(i int) Entry { return es[i] })
			}
		}
	})
}

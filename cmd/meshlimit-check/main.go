// Command meshlimit-check checks meshlimit plugin configurations before they are deployed, with
// the filter's own decoder, and says what a valid one does:
//
//	meshlimit-check envoy/istio/wasmplugin.yaml
//	meshlimit-check plugin.json envoy.yaml
//	kubectl get wasmplugin -n istio-system meshlimit -o yaml | meshlimit-check -
//
// A file may be a bare plugin configuration (JSON or YAML, an object with "rules"), an Istio
// WasmPlugin or TrafficExtension manifest (several YAML documents: each such resource is checked),
// or an Envoy configuration whose envoy.filters.http.wasm filter carries the configuration as a
// google.protobuf.StringValue. Every error of a configuration is printed at once, one per line as
// file:line: field: message; then the command exits 1. A valid configuration gets a summary of its
// rules: what each matches, its key, its limits, whether it counts locally or in the decision
// service, and what changes how it counts. Exit codes: 0 every configuration is valid, 1 one is
// not (or a file holds none), 2 bad usage or a file that cannot be read.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/meshlimit/meshlimit/internal/pluginconfig"
	"github.com/meshlimit/meshlimit/rules"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the command; it returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("meshlimit-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quiet := fs.Bool("q", false, "print only errors, no summary of a valid configuration")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshlimit-check [-q] FILE... (- reads standard input)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	code := 0
	for _, name := range fs.Args() {
		data, err := read(name, stdin)
		if err != nil {
			fmt.Fprintf(stderr, "meshlimit-check: %v\n", err)
			return 2
		}
		if !checkFile(name, data, *quiet, stdout) {
			code = 1
		}
	}
	return code
}

func read(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// checkFile checks every configuration in one file and reports whether all are valid.
func checkFile(name string, data []byte, quiet bool, out io.Writer) bool {
	if name == "-" {
		name = "<stdin>"
	}
	configs, err := pluginconfig.Find(data)
	if err != nil {
		fmt.Fprintf(out, "%s: %v\n", name, err)
		return false
	}
	ok := true
	for i := range configs {
		if !checkConfig(name, &configs[i], quiet, out) {
			ok = false
		}
	}
	return ok
}

// checkConfig prints the errors of one configuration, or its summary, and reports whether it is
// valid.
func checkConfig(name string, c *pluginconfig.Config, quiet bool, out io.Writer) bool {
	summary, err := rules.Explain(c.JSON)
	if err == nil {
		fmt.Fprintf(out, "%s:%d: %s: valid\n", name, c.Line, c.Source)
		if !quiet {
			for _, l := range summary {
				fmt.Fprintf(out, "  %s\n", l)
			}
		}
		return true
	}
	errs := fieldErrors(err)
	fmt.Fprintf(out, "%s:%d: %s: %d error%s\n", name, c.Line, c.Source, len(errs), plural(len(errs)))
	sort.SliceStable(errs, func(i, j int) bool { return c.LineOf(errs[i].Path) < c.LineOf(errs[j].Path) })
	for _, fe := range errs {
		where := fe.Path + ": "
		if fe.Path == "" {
			where = ""
		}
		fmt.Fprintf(out, "%s:%d: %s%s\n", name, c.LineOf(fe.Path), where, fe.Msg)
	}
	return false
}

// fieldErrors flattens the error of rules.ParseConfig into its field errors.
func fieldErrors(err error) []*rules.FieldError {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*rules.FieldError
		for _, e := range j.Unwrap() {
			out = append(out, fieldErrors(e)...)
		}
		return out
	}
	var fe *rules.FieldError
	if errors.As(err, &fe) {
		return []*rules.FieldError{fe}
	}
	return []*rules.FieldError{{Msg: err.Error()}}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

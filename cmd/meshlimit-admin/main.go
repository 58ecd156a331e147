// Command meshlimit-admin inspects or resets one key of a rule in meshlimit's decision service,
// through its admin API (service/API.md, "Admin API"):
//
//	meshlimit-admin -config plugin.json -plugin istio-system.meshlimit -rule login -value alice inspect
//	meshlimit-admin -config plugin.json -plugin istio-system.meshlimit -rule login -value alice reset
//
// It reads the plugin configuration the filter runs with, so that it names the key exactly as the
// filter does: the plugin name, the rule, the fingerprint of each limit, and the key value in its
// human form (the form overrides use: the key parts joined by "|"). The bearer token is read from
// MESHLIMIT_ADMIN_TOKEN (the service's admin token; never its secret, which the service refuses as one).
//
// A reset forgets the key in the service and appends it to the service's reset log, which every
// proxy of the plugin reads every global.reset_poll (default 1s) to forget the key in its shared
// data too: the over-limit cache and penalty box of a global rule, and the whole state of a local
// rule (which the service never holds, so a local rule can be reset but not inspected). The
// answer (JSON, on stdout) gains "seq", the reset's position in the log; a note on stderr says
// when the proxies will have applied it.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/internal/pluginconfig"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr, http.DefaultClient))
}

// run is the command; it returns the exit code: 0 done, 1 the call failed, 2 bad usage.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer, client *http.Client) int {
	fs := flag.NewFlagSet("meshlimit-admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8081", "base URL of the decision service (meshlimit-service listens on :8081 by default)")
	config := fs.String("config", "", "the plugin configuration the filter runs with: JSON or YAML, a WasmPlugin manifest, or an Envoy configuration")
	plugin := fs.String("plugin", "default", "the plugin_name the filter runs as (Istio: <namespace>.<name>)")
	rule := fs.String("rule", "", "the rule's name")
	value := fs.String("value", "", "the key value in its human form (key parts joined by |)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || (fs.Arg(0) != "inspect" && fs.Arg(0) != "reset") {
		fmt.Fprintln(stderr, "usage: meshlimit-admin -config FILE -plugin NAME -rule NAME -value KEY inspect|reset")
		return 2
	}
	op := fs.Arg(0)
	body, local, err := descriptors(*config, *plugin, *rule, *value)
	if err == nil && local && op == "inspect" {
		err = fmt.Errorf("rule %q is local: its state lives in each proxy's shared data, not in the service (it can be reset, not inspected)", *rule)
	}
	if err != nil {
		fmt.Fprintln(stderr, "meshlimit-admin:", err)
		return 2
	}
	out, err := call(client, strings.TrimSuffix(*url, "/")+"/v1/admin/"+op, getenv("MESHLIMIT_ADMIN_TOKEN"), body)
	if err != nil {
		fmt.Fprintln(stderr, "meshlimit-admin:", err)
		return 1
	}
	_, _ = stdout.Write(out)
	if op == "reset" {
		fmt.Fprintln(stderr, resetNote(*plugin, *rule, local, out))
	}
	return 0
}

// resetNote says what a reset does beyond the service: the proxies apply it from the reset log.
func resetNote(plugin, rule string, local bool, answer []byte) string {
	var a struct {
		Seq uint64 `json:"seq"`
	}
	_ = json.Unmarshal(answer, &a)
	what := "their over-limit cache and penalty box"
	if local {
		what = "the local rule's state (the service holds none)"
	}
	return fmt.Sprintf("meshlimit-admin: reset logged at position %d: the proxies of plugin %q forget %s for rule %q within their global.reset_poll (default 1s)",
		a.Seq, plugin, what, rule)
}

// descriptors builds the check body the filter would send for the key: one descriptor per rate
// limit of the set that applies to the key value (an override's, or the rule's own). For a local
// rule it is the body the filter would send were the rule global: the filter composes the same
// fingerprints for local limits, so the keys logged for the reset name its local state. local
// reports a local rule.
func descriptors(config, plugin, rule, value string) (body []byte, local bool, err error) {
	if config == "" || rule == "" {
		return nil, false, errors.New("-config and -rule are required")
	}
	data, err := os.ReadFile(config)
	if err != nil {
		return nil, false, err
	}
	found, err := pluginconfig.Find(data)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", config, err)
	}
	if len(found) != 1 {
		return nil, false, fmt.Errorf("%s holds %d plugin configurations: give a file with one", config, len(found))
	}
	cfg, err := rules.ParseConfig(found[0].JSON)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", config, err)
	}
	var r *rules.Rule
	for _, c := range cfg.Rules() {
		if c.Name == rule {
			r = c
		}
	}
	if r == nil {
		return nil, false, fmt.Errorf("%s has no rule %q", config, rule)
	}
	local = r.Scope == rules.ScopeLocal
	set, unlimited := r.Limits([]byte(value))
	if unlimited {
		return nil, local, fmt.Errorf("rule %q: the key %q is unlimited (an override): no state is kept for it", rule, value)
	}
	b, n := wire.AppendRequestStart(nil), 0
	for _, spec := range set.Limits {
		if spec.Concurrency > 0 {
			continue // permits are not inspected by the admin API
		}
		b = wire.AppendDescriptor(b, n, wire.Key{Plugin: plugin, Rule: r.Name, Fingerprint: spec.Fingerprint, Value: value}, spec.Limit, 1)
		n++
	}
	if n == 0 {
		return nil, local, fmt.Errorf("rule %q has no rate limit", rule)
	}
	return wire.AppendRequestEnd(b), local, nil
}

// call posts body to url with the bearer token and returns the answer, or an error naming the
// status and the service's message.
func call(client *http.Client, url, token string, body []byte) ([]byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	c := *client
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(out)))
	}
	return out, nil
}

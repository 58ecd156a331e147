package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// adminToken is the demo service's admin token (a real one comes from a secret).
const adminToken = "demo-admin-token"

// pluginName is the plugin_name property the host gives the filter: the first part of every key.
const pluginName = "demo.meshlimit"

// operatorReset shows an admin reset reaching the proxies: the operator names the key of rule
// exactly as the filter does (what cmd/meshlimit-admin does from the plugin configuration), the
// service logs the reset, and the proxy's next poll of the log (global.reset_poll, 1s by default)
// forgets the key in its shared data, penalty box included.
func (d *demo) operatorReset(ctx context.Context, p *envoyhost.Plugin, cfg []byte, rule, value string) error {
	body, err := resetBody(cfg, rule, value)
	if err != nil {
		return err
	}
	// The demo's clock stands still between requests: first let the proxy poll once, as Envoy's
	// running ticks have long done, so that it holds a position in the log.
	if err := pollResets(p); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.adminURL+"reset", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("admin reset of %s/%s: %s", rule, value, resp.Status)
	}
	fmt.Fprintf(d.out, "  operator: POST /v1/admin/reset rule %s key %s  %d (logged for the proxies)\n", rule, value, resp.StatusCode)
	return pollResets(p)
}

// pollResets advances the clock to the proxy's next reset_poll tick and waits for its poll's answer.
func pollResets(p *envoyhost.Plugin) error {
	p.Clock().Advance(time.Second)
	for deadline := time.Now().Add(5 * time.Second); p.CallsInFlight() > 0; {
		if time.Now().After(deadline) {
			return fmt.Errorf("the proxy's poll of the reset log did not come back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// resetBody is the admin API's body naming value's key of rule in every rate limit of its set.
func resetBody(cfg []byte, rule, value string) ([]byte, error) {
	c, err := rules.ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	for _, r := range c.Rules() {
		if r.Name != rule {
			continue
		}
		set, _ := r.Limits([]byte(value))
		b := wire.AppendRequestStart(nil)
		for i, spec := range set.Limits {
			b = wire.AppendDescriptor(b, i, wire.Key{Plugin: pluginName, Rule: r.Name, Fingerprint: spec.Fingerprint, Value: value}, spec.Limit, 1)
		}
		return wire.AppendRequestEnd(b), nil
	}
	return nil, fmt.Errorf("the configuration has no rule %q", rule)
}

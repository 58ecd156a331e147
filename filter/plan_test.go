package filter

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randomLocalConfig is a configuration of 1 to 3 local rate rules: keys on the client address
// (masked or not), a header, or both; matches on a path prefix, a method or nothing; 1 to 3 small
// limits of every algorithm that decides at once, so that denials come; shadow rules and enforce
// off, percent enforcement, per-key overrides (unlimited ones too), bounded keys with an overflow,
// a cost read from a header, missing-key modes, and the response's header sets, partition keys and
// quota fields on or off.
func randomLocalConfig(rng *rand.Rand) string {
	algos := []string{"token_bucket", "fixed_window", "sliding_window", "sliding_log"}
	keys := []any{[]any{"client_ip"}, []any{map[string]any{"client_ip": map[string]any{"ipv4_mask": 24, "ipv6_mask": 64}}},
		[]any{map[string]any{"header": "x-user"}}, []any{"client_ip", map[string]any{"header": "x-user"}}}
	var rs []map[string]any
	for i := range 1 + rng.IntN(3) {
		var limits []map[string]any
		for j := range 1 + rng.IntN(3) {
			limits = append(limits, map[string]any{"rate": fmt.Sprintf("%d/%s", 1+rng.IntN(4), []string{"s", "m", "h"}[j%3]),
				"algorithm": algos[rng.IntN(len(algos))]})
		}
		r := map[string]any{"name": fmt.Sprintf("r%d", i), "key": keys[rng.IntN(len(keys))], "limits": limits}
		switch rng.IntN(4) {
		case 0:
			r["match"] = map[string]any{"path": map[string]any{"prefix": "/api/"}}
		case 1:
			r["match"] = map[string]any{"methods": []string{"POST"}}
		}
		if rng.IntN(5) == 0 {
			r["shadow"], r["shadow_header"] = true, "x-shadowed"
		}
		if rng.IntN(5) == 0 {
			r["enforce_percent"] = 50
		}
		if rng.IntN(3) == 0 && len(r["key"].([]any)) == 1 && fmt.Sprint(r["key"]) == "[map[header:x-user]]" {
			r["overrides"] = []map[string]any{{"value": "vip", "limits": []map[string]any{{"rate": "9/m"}}}, {"value": "root", "unlimited": true}}
		}
		if rng.IntN(4) == 0 {
			r["max_keys"], r["overflow"] = 2, []map[string]any{{"rate": "3/m"}}
		}
		if rng.IntN(4) == 0 {
			r["cost"] = map[string]any{"header": "x-cost", "default": 1, "max": 3}
		}
		if rng.IntN(4) == 0 {
			r["missing_key"] = []string{"skip", "default"}[rng.IntN(2)]
		}
		rs = append(rs, r)
	}
	resp := map[string]any{"rate_limit_headers": [][]string{{"ietf"}, {"draft03"}, {"ietf", "draft03"}, {"none"}}[rng.IntN(4)],
		"quota_headers_on_allowed": rng.IntN(4) > 0}
	if rng.IntN(3) == 0 {
		resp["partition_key"], resp["partition_key_secret"] = true, "0123456789abcdef"
	}
	cfg := map[string]any{"rules": rs, "response": resp}
	if rng.IntN(8) == 0 {
		cfg["enforce"] = false
	}
	data, _ := json.Marshal(cfg)
	return string(data)
}

// randomLocalRequest is a request of one of a few clients (IPv4 and IPv6 sources, some in one
// /24), with or without a user header (repeated with different values now and then), a cost
// header, a POST or a GET, under /api/ or not.
func randomLocalRequest(rng *rand.Rand) (source string, headers [][2]string) {
	source = []string{"192.0.2.10:5555", "192.0.2.11:40000", "198.51.100.7:1", "[2001:db8::1]:443", "[2001:db8::2]:80", "not an address"}[rng.IntN(6)]
	path := []string{"/api/items", "/api/items?page=2", "/other"}[rng.IntN(3)]
	headers = [][2]string{{":method", []string{"GET", "POST"}[rng.IntN(2)]}, {":path", path}, {":authority", "a.example"}}
	if n := rng.IntN(5); n > 0 {
		headers = append(headers, [2]string{"x-user", []string{"ann", "bob", "vip", "root"}[n-1]})
		if rng.IntN(10) == 0 {
			headers = append(headers, [2]string{"x-user", "eve"})
		}
	}
	if rng.IntN(3) == 0 {
		headers = append(headers, [2]string{"x-cost", []string{"1", "2", "7", "x"}[rng.IntN(4)]})
	}
	return source, headers
}

// answered is what the host saw of one stream: the request headers' action, the request as sent
// upstream, the local reply, and the response as sent to the client.
type answered struct {
	Action   any
	Req      [][2]string
	Reply    *fakeReply
	Resp     [][2]string
	Resumed  [2]int
	Closed   int
	Property map[string]string
}

func runOnce(f *fakeHost, p *pluginContext, source string, headers [][2]string) answered {
	f.props["source\x00address"] = source
	h, act := f.open(p, append([][2]string(nil), headers...), true)
	s := f.of(h)
	if s.reply == nil {
		f.respond(h, [][2]string{{":status", "200"}}, true)
	}
	f.end(h)
	return answered{act, s.req, s.reply, s.resp, s.resumed, s.closed, s.props}
}

func TestTheLocalPlanDecidesAndAnswersEveryRequestAsTheGeneralPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 1))
	planned := 0
	for c := range 300 {
		cfg := randomLocalConfig(rng)
		fl, fg := newFakeHost(t), newFakeHost(t)
		pl := fl.start(cfg)
		secret := "meshlimit/test.meshlimit/sentinel/secret" // the slots' hash key: both hosts the same
		v, _, err := fl.Get(secret)
		require.NoError(t, err)
		require.NoError(t, fg.Set(secret, v, 0))
		pg := fg.start(cfg)
		require.True(t, pl.local, "config %d: %s", c, cfg)
		pg.local = false // the general path
		planned++
		for i := range 60 {
			source, headers := randomLocalRequest(rng)
			got, want := runOnce(fl, pl, source, headers), runOnce(fg, pg, source, headers)
			require.Equal(t, want, got, "config %d request %d %s %v: %s", c, i, source, headers, cfg)
			if step := time.Duration(rng.IntN(3)) * 700 * time.Millisecond; step > 0 {
				fl.advance(step)
				fg.advance(step)
			}
		}
		pl.stats.flush()
		pg.stats.flush()
		require.Equal(t, fg.metrics, fl.metrics, "config %d: %s", c, cfg)
		require.Equal(t, fg.logs, fl.logs, "config %d: %s", c, cfg)
	}
	require.Equal(t, 300, planned)
}

func TestOnlyAConfigurationOfLocalRateRulesIsPlanned(t *testing.T) {
	rule := `{"name": "r", "key": ["client_ip"], "limits": [{"rate": "5/s"}]%s}`
	for _, tc := range []struct {
		name, cfg string
		planned   bool
	}{
		{"local rate rules", `{"rules": [` + fmt.Sprintf(rule, "") + `]}`, true},
		{"a counted rule", `{"rules": [` + fmt.Sprintf(rule, `, "count_on": {"status": ["401"]}`) + `]}`, false},
		{"a settled cost", `{"rules": [` + fmt.Sprintf(rule, `, "cost": {"default": 1, "max": 10, "settle": {"response_header": "x-cost"}}`) + `]}`, false},
		{"a shaping limit", `{"rules": [{"name": "r", "key": ["client_ip"], "limits": [{"rate": "5/s", "algorithm": "leaky_bucket", "burst": 2}]}]}`, false},
		{"a concurrency limit", `{"rules": [{"name": "r", "key": ["client_ip"], "limits": [{"concurrency": 3}]}]}`, false},
		{"a message limit", `{"rules": [{"name": "r", "key": ["client_ip"], "messages": {}, "limits": [{"rate": "5/s"}]}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, status := newFakeHost(t).startStatus(tc.cfg)
			if p.cfg == nil {
				t.Skipf("configuration refused (%v): not a case", status)
			}
			require.Equal(t, tc.planned, p.local)
		})
	}
}

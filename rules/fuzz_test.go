package rules

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/sfv"
)

// Fuzz targets. They run their seeds in every `go test`; run one for real with e.g.
//
//	go test ./filter/ -run '^$' -fuzz '^FuzzParseConfig$' -fuzztime 60s

// FuzzParseConfig checks that the decoder never panics, that every error is a config error
// naming its field, and that an accepted configuration is internally valid and accepted
// again, with the same meaning, after a round trip through a generic JSON value.
func FuzzParseConfig(f *testing.F) {
	for _, dir := range []string{"valid", "invalid"} {
		files, _ := filepath.Glob(filepath.Join("testdata", "config", dir, "*.json"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(benchConfig))
	f.Add([]byte(`{"rules":[{"name":"a","limits":[{"rate":"10000/month","calendar_offset":"+02:00"},{"rate":"5/week","algorithm":"fixed_window"}]}]}`))
	f.Add([]byte(`{"rules":[{"name":"a","limits":[{"rate":"1/s"}],"key":[{"header":"x"}],"overrides":[{"value":"a\\|b","unlimited":true}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		c, err := ParseConfig(data)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "config: ") {
					t.Fatalf("error line %q lacks the config: prefix", line)
				}
			}
			return
		}
		checkCompiled(t, c)

		again, err := ParseConfig(data)
		if err != nil || again.Summary() != c.Summary() {
			t.Fatalf("parsing again gave %v, %q; first %q", err, again.Summary(), c.Summary())
		}
		if !utf8.Valid(data) {
			return // a round trip would replace invalid UTF-8 and change values
		}
		var generic any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&generic); err != nil {
			t.Fatalf("accepted config does not decode generically: %v", err)
		}
		re, err := json.Marshal(generic)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseConfig(re)
		if err != nil {
			t.Fatalf("re-encoded config %s is rejected: %v", re, err)
		}
		if c2.Summary() != c.Summary() {
			t.Fatalf("summary changed on re-encoding: %q vs %q", c2.Summary(), c.Summary())
		}
		for i, r := range c.Rules() {
			if r.Fingerprint() != c2.Rules()[i].Fingerprint() {
				t.Fatalf("rule %s: fingerprint changed on re-encoding", r.Name)
			}
		}
	})
}

// checkCompiled asserts the invariants every accepted configuration has.
func checkCompiled(t *testing.T, c *Config) {
	t.Helper()
	if len(c.Rules()) == 0 || strings.Contains(c.Summary(), "\n") {
		t.Fatalf("bad config: %d rules, summary %q", len(c.Rules()), c.Summary())
	}
	if c.Response.Status < 400 || c.Response.Status > 599 {
		t.Fatalf("status %d", c.Response.Status)
	}
	for _, r := range c.Rules() {
		if !ruleNameRE.MatchString(r.Name) || r.MaxKeys < 1 || r.MaxKeys > maxMaxKeys {
			t.Fatalf("rule %q: max_keys %d", r.Name, r.MaxKeys)
		}
		var lists [][]LimitSpec
		for i, set := range r.LimitSets() {
			if set.Index != i || (i == 0 && set.Slots != r.MaxKeys) || (i > 0 && set.Slots != 1) {
				t.Fatalf("rule %s: set %d has index %d", r.Name, i, set.Index)
			}
			lists = append(lists, set.Limits)
		}
		for v, i := range r.overrides {
			if i >= len(r.sets) || (i > 0 && r.sets[i].Override != v) {
				t.Fatalf("rule %s: override %q points at set %d", r.Name, v, i)
			}
		}
		for _, list := range lists {
			if len(list) < 1 || len(list) > maxLimits {
				t.Fatalf("rule %s: %d limits", r.Name, len(list))
			}
			for _, l := range list {
				if l.Concurrency != 0 { // a concurrency limit has no algorithm
					if l.Concurrency < 1 || l.Concurrency > maxConcurrency || len(list) != 1 || r.Concurrency() == nil {
						t.Fatalf("rule %s: concurrency %d among %d limits", r.Name, l.Concurrency, len(list))
					}
				} else if err := l.Limit.Validate(); err != nil {
					t.Fatalf("rule %s: accepted an invalid limit: %v", r.Name, err)
				}
				if !policyNameRE.MatchString(l.Name) {
					t.Fatalf("rule %s: policy name %q", r.Name, l.Name)
				}
			}
		}
		if r.cost.header == "" && r.cost.constant < 1 || r.cost.header != "" && (r.cost.def < 1 || r.cost.def > r.cost.max) {
			t.Fatalf("rule %s: cost %+v", r.Name, r.cost)
		}
	}
}

// FuzzClientIP feeds hostile x-forwarded-for and source addresses to the client_ip part.
func FuzzClientIP(f *testing.F) {
	for _, s := range []struct {
		xff, source  string
		hops, v4, v6 uint8
	}{
		{"198.51.100.1, 203.0.113.7", "10.0.0.1:80", 1, 24, 64},
		{"[2001:db8::1]:443,::ffff:1.2.3.4", "[fe80::1%eth0]:80", 2, 0, 48},
		{" , ,,\t,", "", 3, 32, 128},
		{strings.Repeat("1.1.1.1,", 2000), "garbage", 64, 8, 1},
		{"1.2.3.4%x, [::1%", "[::1]x", 1, 0, 0},
		{strings.Repeat("9", 5000), strings.Repeat(":", 300), 1, 16, 16},
	} {
		f.Add(s.xff, s.source, s.hops, s.v4, s.v6)
	}
	f.Fuzz(func(t *testing.T, xff, source string, hops, v4, v6 uint8) {
		p := keyPart{kind: keyClientIP, trustedHops: int(hops % (maxTrustedHops + 1)), v4Bits: 1 + int(v4%32), v6Bits: 1 + int(v6%128)}
		req := &fakeRequest{source: source, headers: map[string]string{"x-forwarded-for": xff}}
		out, st := p.appendClientIP(make([]byte, 0, 64), req)
		if st != KeyFound {
			if len(out) != 0 {
				t.Fatalf("missing part left %q", out)
			}
			return
		}
		if len(out) > 64 {
			t.Fatalf("key part %q is longer than any address", out)
		}
		s := string(out)
		if strings.Contains(s, "/") {
			pfx, err := netip.ParsePrefix(s)
			if err != nil || pfx.Masked() != pfx || pfx.Addr().Is4In6() || pfx.Addr().Zone() != "" {
				t.Fatalf("bad prefix %q: %v", s, err)
			}
			want := p.v6Bits
			if pfx.Addr().Is4() {
				want = p.v4Bits
			}
			if pfx.Bits() != want {
				t.Fatalf("prefix %q has %d bits, want %d", s, pfx.Bits(), want)
			}
			return
		}
		addr, err := netip.ParseAddr(s)
		if err != nil || addr.Is4In6() || addr.Zone() != "" {
			t.Fatalf("bad address %q: %v", s, err)
		}
	})
}

// FuzzAppendKey checks that keys are bounded and unambiguous whatever the request holds.
func FuzzAppendKey(f *testing.F) {
	f.Add("k1", "/a?q=1", "Host", "GET", "user")
	f.Add(`a|b\c`, "/?q=%7C%5C&q=2", "h:1", "", "")
	f.Add(strings.Repeat("x|", 40000), "/?q="+strings.Repeat("%41", 3000), strings.Repeat("H", 1000), "M", strings.Repeat(`\`, 300))
	r := ruleOf(f, `{"name": "r", "limits": [{"rate": "1/s"}], "key": [{"header": "x-key"}, {"query": "q"}, "host", "method", {"property": "p"}, "path"]}`)
	single := ruleOf(f, `{"name": "s", "limits": [{"rate": "1/s"}], "key": [{"header": "x-key"}]}`)
	f.Fuzz(func(t *testing.T, header, path, host, method, prop string) {
		req := &fakeRequest{
			headers: map[string]string{"x-key": header}, path: path, host: host, method: method,
			props: map[string]string{"p": prop},
		}
		key, st := r.AppendKey(nil, req)
		ok := st == KeyFound
		if !ok {
			if len(key) != 0 {
				t.Fatalf("skipped rule left %q", key)
			}
			return
		}
		if len(key) > len(r.key)*(2*maxPartLen+1) {
			t.Fatalf("key of %d bytes exceeds the bound", len(key))
		}
		if n := len(splitKey(t, key)); n != len(r.key) {
			t.Fatalf("key %q splits into %d parts, want %d", key, n, len(r.key))
		}

		k1, st := single.AppendKey(nil, req)
		if st != KeyFound {
			return
		}
		parts := splitKey(t, k1)
		if len(parts) != 1 {
			t.Fatalf("single-part key %q splits into %d", k1, len(parts))
		}
		if len(header) <= maxPartLen && parts[0] != header {
			t.Fatalf("key %q unescapes to %q, want %q", k1, parts[0], header)
		}
	})
}

// splitKey splits a key value at unescaped bars and unescapes each part; a hashed part
// stays `\#…`.
func splitKey(t *testing.T, key []byte) []string {
	var parts []string
	var cur []byte
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '\\':
			if i+1 >= len(key) {
				t.Fatalf("key %q ends in a lone backslash", key)
			}
			i++
			if key[i] == '#' {
				cur = append(cur, '\\', '#')
			} else {
				cur = append(cur, key[i])
			}
		case '|':
			parts = append(parts, string(cur))
			cur = cur[:0]
		default:
			cur = append(cur, c)
		}
	}
	return append(parts, string(cur))
}

// FuzzDeny renders arbitrary decisions and checks the output parses and keeps its promises.
func FuzzDeny(f *testing.F) {
	f.Add(int64(0), int64(time.Second), int64(time.Second), false, int64(5), int64(time.Minute), true, uint64(3), false)
	f.Add(int64(-7), int64(-1), int64(algorithms.RetryNever), false, int64(1<<62), int64(1<<62), false, uint64(1<<63), true)
	cfg := mustParse(f, `{"response": {"body_format": "problem_json", "rate_limit_headers": ["ietf", "draft03"], "retry_after_jitter": "3s",
		"effective_window_jitter": "4s"},
		"rules": [{"name": "r", "limits": [{"rate": "10/s"}, {"rate": "1000/1h30m"}]}]}`)
	limits := cfg.Rules()[0].limits()
	f.Fuzz(func(t *testing.T, rem1, reset1, retry1 int64, ok1 bool, rem2, reset2 int64, ok2 bool, random uint64, grpc bool) {
		outcomes := []Outcome{
			{Limit: &limits[0], Decision: algorithms.Decision{Allowed: ok1, Remaining: rem1, Reset: time.Duration(reset1), RetryAfter: time.Duration(retry1)}},
			{Limit: &limits[1], Decision: algorithms.Decision{Allowed: ok2, Remaining: rem2, Reset: time.Duration(reset2), RetryAfter: time.Duration(reset2)}},
		}
		var lr LocalResponse
		cfg.Response.Deny(&lr, nil, outcomes, grpc, random)
		var maxT int64
		for _, name := range []string{HeaderRateLimitPolicy, HeaderRateLimit, HeaderXRateLimitLimit} {
			v, ok := header(t, lr.Headers, name)
			if !ok {
				t.Fatalf("%s missing", name)
			}
			members, err := sfv.ParseList(v)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, v, err)
			}
			if name == HeaderRateLimit {
				for _, m := range members {
					name := string(m.Value.(sfv.String))
					if name == limits[0].Name && ok1 || name == limits[1].Name && ok2 {
						continue // only denying policies bound Retry-After
					}
					for _, p := range m.Params {
						if n := p.Value.(int64); p.Key == "t" && n > maxT {
							maxT = n
						}
					}
				}
			}
		}
		never := !ok1 && retry1 == int64(algorithms.RetryNever) || !ok2 && reset2 == int64(algorithms.RetryNever)
		v, has := header(t, lr.Headers, HeaderRetryAfter)
		if has == never {
			t.Fatalf("Retry-After present=%v with a never-admissible cost=%v", has, never)
		}
		if has {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 || n < maxT {
				t.Fatalf("Retry-After %q against max t %d", v, maxT)
			}
		}
		if !grpc && !json.Valid(lr.Body) {
			t.Fatalf("invalid problem body %s", lr.Body)
		}
	})
}

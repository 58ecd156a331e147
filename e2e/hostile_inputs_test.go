package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Hostile inputs on the compiled module, several worker VMs: a client must not slip past a rule by
// rewriting what it sends, nor turn the limiter against other clients.

// spread runs n requests over every worker VM of p, one goroutine per VM, and returns how many were
// admitted. req(i) builds the i-th request.
func spread(t *testing.T, p *envoyhost.Plugin, workers, n int, req func(i int) *envoyhost.Request) int {
	t.Helper()
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := 0
			for i := w; i < n; i += workers {
				if status(roundTrip(t, p.VM(w), req(i))) == 200 {
					mine++
				}
			}
			mu.Lock()
			admitted += mine
			mu.Unlock()
		}()
	}
	wg.Wait()
	return admitted
}

// inSlash64 returns the i-th address of 2001:db8:7:9::/64, scattered over its interface bits.
func inSlash64(i int) string {
	a := netip.MustParseAddr("2001:db8:7:9::").As16()
	x := uint64(i)*0x9e3779b97f4a7c15 + 1
	for b := 8; b < 16; b++ {
		a[b] = byte(x >> (8 * (15 - b)))
	}
	return "[" + netip.AddrFrom16(a).String() + "]"
}

func TestAClientRotatingThroughItsSlash64IsAdmittedItsQuotaAndHarmsNoIPv4Client(t *testing.T) {
	const workers, attack = 4, 60_000
	p := load(t, module(t, "meshlimit"), `{"max_keys": 1000, "rules": [{"name": "per-ip", "key": ["client_ip"],
		"limits": [{"rate": "5/m", "algorithm": "fixed_window"}]}]}`, workers)
	admitted := spread(t, p, workers, attack, func(i int) *envoyhost.Request {
		r := get("api.example.com", "/v1/items", "")
		r.Info.SourceAddress = inSlash64(i) + ":40000"
		return r
	})
	assert.Equal(t, 5, admitted, "one /64 is one client: its quota, not one per address")

	denied := 0
	for i := range 100 {
		if status(roundTrip(t, p.VM(i%workers), get("api.example.com", "/v1/items", fmt.Sprintf("198.51.100.%d", i)))) != 200 {
			denied++
		}
	}
	assert.Zero(t, denied, "IPv4 clients keep their own buckets")
	t.Logf("admitted %d of %d rotating requests; %d of 100 IPv4 clients denied", admitted, attack, denied)
}

func TestARepeatedXUserCannotMintFreshBuckets(t *testing.T) {
	const workers = 4
	p := load(t, module(t, "meshlimit"), `{"rules": [{"name": "per-user", "key": [{"header": "x-user"}],
		"limits": [{"rate": "5/m", "algorithm": "fixed_window"}]}]}`, workers)
	alice := func(i int) *envoyhost.Request { return get("a", "/", "192.0.2.1", [2]string{"x-user", "alice"}) }
	assert.Equal(t, 5, spread(t, p, workers, 8, alice), "alice's own quota")

	minted := spread(t, p, workers, 2_000, func(i int) *envoyhost.Request {
		return get("a", "/", "192.0.2.1", [2]string{"x-user", fmt.Sprintf("r%d", i)}, [2]string{"x-user", "alice"})
	})
	assert.Zero(t, minted, "a random first value in front of alice's gets no bucket of its own")
	twice := spread(t, p, workers, 4, func(int) *envoyhost.Request {
		return get("a", "/", "192.0.2.1", [2]string{"x-user", "alice"}, [2]string{"x-user", "alice"})
	})
	assert.Zero(t, twice, "alice repeated is alice, and alice is out of quota")
	assert.Equal(t, 5, spread(t, p, workers, 20, func(i int) *envoyhost.Request {
		return get("a", "/", "192.0.2.1", [2]string{"x-user", "bob"})
	}), "bob is untouched")
}

func TestRepeatedHeadersReachTheFilterSeparatelyThroughTheHTTPProxy(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An upstream that reads the header as one list (RFC 9110) and trusts its last element.
		list := strings.Split(strings.Join(r.Header.Values("X-User"), ","), ",")
		mu.Lock()
		served[strings.TrimSpace(list[len(list)-1])]++
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	defer upstream.Close()
	p := load(t, module(t, "meshlimit"), `{"rules": [{"name": "per-user", "key": [{"header": "x-user"}],
		"limits": [{"rate": "3/m", "algorithm": "fixed_window"}]}]}`, 2)
	proxy := &envoyhost.HTTPProxy{Plugin: p, Upstream: upstream.URL}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- proxy.ListenAndServe(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	base := "http://" + (<-addrc).String()
	client := &http.Client{Timeout: patience}
	for i := range 50 {
		req, err := http.NewRequest("GET", base+"/", nil)
		require.NoError(t, err)
		req.Header.Add("X-User", fmt.Sprintf("r%d", i))
		req.Header.Add("X-User", "alice")
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	mu.Lock()
	assert.Zero(t, served["alice"], "no request served as alice through a minted bucket")
	mu.Unlock()
	cancel()
	require.NoError(t, <-done)
}

func TestPathAndHostVariantsDoNotEscapePrefixExactOrHosts(t *testing.T) {
	const workers = 3
	p := load(t, module(t, "meshlimit"), `{"rules": [
		{"name": "prefix", "match": {"hosts": ["api.example.com"], "path": {"prefix": "/api/"}}, "limits": [{"rate": "2/m", "algorithm": "fixed_window"}]},
		{"name": "exact", "match": {"path": {"exact": "/login"}}, "limits": [{"rate": "2/m", "algorithm": "fixed_window"}]},
		{"name": "nocase", "match": {"path": {"prefix": "/admin", "ignore_case": true}}, "limits": [{"rate": "2/m", "algorithm": "fixed_window"}]}]}`, workers)
	use := func(host, path string) int {
		return spread(t, p, workers, 2, func(int) *envoyhost.Request { return get(host, path, "192.0.2.1") })
	}
	require.Equal(t, 2, use("api.example.com", "/api/items"))
	require.Equal(t, 2, use("x", "/login"))
	require.Equal(t, 2, use("x", "/admin/users"))

	variants := []struct{ host, path string }{
		{"api.example.com", "//api/items"},
		{"api.example.com", "/%61pi/items"},
		{"api.example.com", "/./api/items"},
		{"api.example.com", "/x/../api/items"},
		{"api.example.com.", "/api/items"},
		{"API.Example.com:8443", "/api/items"},
		{"x", "//login"},
		{"x", "/%6Cogin?next=/"},
		{"x", "/./login"},
		{"x", "/x/../login"},
		{"x", "/ADMIN/users"},
		{"x", "/%41dmin"},
	}
	for _, v := range variants {
		res := roundTrip(t, p.VM(1), get(v.host, v.path, "192.0.2.1"))
		assert.Equal(t, 429, status(res), "%s%s must hit its exhausted rule", v.host, v.path)
	}
	assert.Equal(t, 200, status(roundTrip(t, p.VM(0), get("api.example.com", "/apix", "192.0.2.1"))), "another path is another matter")
}

func TestTheCatastrophicRegexIsRefusedAtPluginStart(t *testing.T) {
	cfg := envoyhost.Config{
		VMID: "meshlimit", PluginName: "default.meshlimit", RootID: "meshlimit", Workers: 2,
		PluginConfig: []byte(`{"rules":[{"name":"r","limits":[{"rate":"10/s"}],
			"match":{"headers":[{"name":"x-probe","regex":".*(?:.?){1000}"}]}}]}`),
	}
	var critical []string
	cfg.OnLog = func(e envoyhost.LogEntry) {
		if e.Level == envoyhost.LogCritical {
			critical = append(critical, e.Message)
		}
	}
	p, err := envoyhost.NewPlugin(context.Background(), module(t, "meshlimit"), cfg)
	if p != nil {
		_ = p.Close()
	}
	require.Error(t, err, "the plugin does not start")
	require.Len(t, critical, 1)
	assert.Contains(t, critical[0], "rules[0].match.headers[0].regex")
	assert.Contains(t, critical[0], "at most 200 are allowed")
}

func TestAHeaderValueTooLongForARegexIsNotMatchedAndTheRuleStillApplies(t *testing.T) {
	// "Apply unless x-probe is all a's": a 16 KiB value of a's is beyond the regex input bound, so
	// the regex is not run and the condition holds: the rule applies (it never escapes one).
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"r","limits":[{"rate":"1/m","algorithm":"fixed_window"}],
		"match":{"headers":[{"name":"x-probe","regex":"a+","invert":true}]}}]}`, 2)
	long := make([]byte, 16<<10)
	for i := range long {
		long[i] = 'a'
	}
	codes := []int{}
	for i := range 3 {
		codes = append(codes, status(roundTrip(t, p.VM(i%2), get("a", "/", "192.0.2.1", [2]string{"x-probe", string(long)}))))
	}
	assert.Equal(t, []int{200, 429, 429}, codes, "a 16 KiB value is not matched, and the rule applies")
	assert.Equal(t, 200, status(roundTrip(t, p.VM(0), get("a", "/", "192.0.2.1", [2]string{"x-probe", "aaaa"}))),
		"within the bound the regex decides")
}

// TestPathParametersAndATrailingSlashDoNotEscapeAPrefixOrExactRule: issue 20, finding 9. Servlet
// containers route "/api;x" as "/api" and most frameworks serve "/login/" as "/login": a rule on
// the one holds for the others, and a path key does not tell them apart.
func TestPathParametersAndATrailingSlashDoNotEscapeAPrefixOrExactRule(t *testing.T) {
	const workers = 3
	p := load(t, module(t, "meshlimit"), `{"rules": [
		{"name": "prefix", "match": {"path": {"prefix": "/api/"}}, "limits": [{"rate": "2/m", "algorithm": "fixed_window"}]},
		{"name": "exact", "match": {"path": {"exact": "/login"}}, "limits": [{"rate": "2/m", "algorithm": "fixed_window"}]},
		{"name": "per-path", "match": {"path": {"prefix": "/files/"}}, "key": ["path"], "limits": [{"rate": "2/m", "algorithm": "fixed_window"}]}]}`, workers)
	use := func(path string) int {
		return spread(t, p, workers, 2, func(int) *envoyhost.Request { return get("x", path, "192.0.2.1") })
	}
	require.Equal(t, 2, use("/api/items"))
	require.Equal(t, 2, use("/login"))
	require.Equal(t, 2, use("/files/a"))
	for _, path := range []string{
		"/api;x/items", "/api/items;jsessionid=1", "/..;/api/items", "/api", "/api;x",
		"/login/", "/login;jsessionid=1", "/login;x/", "/x/..;/login",
		"/files/a;v=2", "/files;x/a",
	} {
		res := roundTrip(t, p.VM(1), get("x", path, "192.0.2.1"))
		assert.Equal(t, 429, status(res), "%s must hit its exhausted rule", path)
	}
	assert.Equal(t, 200, status(roundTrip(t, p.VM(0), get("x", "/api%3Bx/items", "192.0.2.1"))), "an encoded ';' is data: another path")
	assert.Equal(t, 200, status(roundTrip(t, p.VM(0), get("x", "/loginx", "192.0.2.1"))), "another path is another matter")
}

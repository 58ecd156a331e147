package service_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/redistest"
	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/memstore"
)

// floodTally counts the answers of one kind of caller in a flood.
type floodTally struct{ answered, refused atomic.Int64 }

func (f *floodTally) String() string {
	a, r := f.answered.Load(), f.refused.Load()
	return fmt.Sprintf("%d of %d answered, %d refused", a, a+r, r)
}

// floodBody is a check of n descriptors of fresh keys of caller c's i-th call, under a quota
// no call reaches (every descriptor is decided: the most work a check can ask for).
func floodBody(c, i, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"descriptors":[`)
	for d := range n {
		if d > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"key":"flood/%d/%d/%d","algorithm":"token_bucket","quota":1000000,"window_ms":60000}`, c, i, d)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func floodPost(client *http.Client, url string, body []byte, t *floodTally) {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.refused.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.answered.Add(1)
	} else {
		t.refused.Add(1)
	}
}

// scriptsRun is the number of scripts redis-server ran (EVALSHA and EVAL calls).
func scriptsRun(t *testing.T, r *redistest.Server) int64 {
	info, err := r.Do("INFO", "commandstats")
	require.NoError(t, err)
	var n int64
	for _, m := range regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`).FindAllStringSubmatch(info, -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n
}

// TestTheFloodReport runs the attack of the admission finding against a real redis-server and
// reports what it got, asserting nothing of the machine's speed (MESHLIMIT_FLOOD=1 runs it; see
// BENCHMARKS.md, "Admission"; MESHLIMIT_FLOOD_TIMEOUT_MS sets the deadline, MESHLIMIT_FLOOD_RATE
// a rate of checks per caller and second instead of one check after the other, the victim's
// included; MESHLIMIT_FLOOD_STORE_MS a round trip added to every store call, as a remote Redis
// or a machine short of CPU has): 32 callers send 16-descriptor checks at the default 10 ms
// deadline while a victim sends 180 single-descriptor checks one after the other; the callers
// stop when the victim is done. Each answered check ran one script, so the scripts Redis ran
// beyond the answered checks are work whose answer nobody used.
func TestTheFloodReport(t *testing.T) {
	if os.Getenv("MESHLIMIT_FLOOD") == "" {
		t.Skip("MESHLIMIT_FLOOD=1 runs the flood report (its figures depend on the machine)")
	}
	const callers, descriptors, victimChecks = 32, 16, 180
	redis := redistest.Start(t)
	timeout := service.DefaultTimeout
	if ms, err := strconv.Atoi(os.Getenv("MESHLIMIT_FLOOD_TIMEOUT_MS")); err == nil && ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	var under service.Store = newRedisStore(t, redis.Addr())
	if ms, err := strconv.Atoi(os.Getenv("MESHLIMIT_FLOOD_STORE_MS")); err == nil && ms > 0 {
		under = &roundTripStore{Store: under, rtt: time.Duration(ms) * time.Millisecond}
	}
	store := floodStore(under)
	h, err := service.NewHandler(service.Config{Store: store, Timeout: timeout})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	url := srv.URL + "/v1/check"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * callers}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	rate, _ := strconv.Atoi(os.Getenv("MESHLIMIT_FLOOD_RATE"))
	before, start := scriptsRun(t, redis), time.Now()
	var attack, victim floodTally
	done := make(chan struct{})
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rate > 0 {
				floodAtRate(client, url, c, descriptors, rate, done, &attack)
				return
			}
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				floodPost(client, url, floodBody(c, i, descriptors), &attack)
			}
		}()
	}
	var pace <-chan time.Time // the victim's checks one after the other, at the rate if set
	if rate > 0 {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		pace = tick.C
	}
	for i := range victimChecks {
		if pace != nil {
			<-pace
		}
		floodPost(client, url, floodBody(callers, i, 1), &victim)
	}
	close(done)
	wg.Wait()
	elapsed, ran := time.Since(start), scriptsRun(t, redis)-before
	used := attack.answered.Load() + victim.answered.Load()
	if g, ok := store.(interface{ StoreTime() time.Duration }); ok {
		t.Logf("the gate's measure of the store's time per call: %v", g.StoreTime())
	}
	st := store.Stats()
	t.Logf("flood at a %v deadline, rate %d, %v: attackers %v; victim %v; Redis ran %d scripts, %d of them thrown away; %d answered after their deadline, %d refused by the gate", timeout, rate, elapsed.Round(time.Millisecond), &attack, &victim, ran, ran-used, st.Late, st.Overloaded)
}

// floodAtRate sends caller c's checks at rate a second until done, each in its own goroutine,
// whatever the answers: as proxies do, whose checks come with their clients' requests.
func floodAtRate(client *http.Client, url string, c, descriptors, rate int, done <-chan struct{}, t *floodTally) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			floodPost(client, url, floodBody(c, i, descriptors), t)
		}()
	}
}

// floodStore is the store the service runs on Redis (cmd/meshlimit-service): a Gate of the
// default bounds (-store-min-inflight, -store-max-inflight) in front of a FullFallback.
func floodStore(s service.Store) service.Store {
	return service.NewGate(&service.FullFallback{Store: s, MaxKeys: 1 << 20, Local: memstore.New(memstore.Config{})}, service.GateConfig{MinWork: 128, MaxWork: 16 * 128})
}

// roundTripStore is a store whose every decision call takes rtt more: a round trip that does
// not grow with the calls in flight (a remote Redis, a machine short of CPU).
type roundTripStore struct {
	service.Store
	rtt time.Duration
}

func (s *roundTripStore) Decide(ctx context.Context, r service.Request) (algorithms.Decision, error) {
	time.Sleep(s.rtt)
	return s.Store.Decide(ctx, r)
}

func (s *roundTripStore) DecideAll(ctx context.Context, reqs []service.Request, out []algorithms.Decision) (int, error) {
	time.Sleep(s.rtt)
	return service.DecideAll(ctx, s.Store, reqs, out)
}

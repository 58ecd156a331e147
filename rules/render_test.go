package rules

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/sfv"
)

// unrendered returns a copy of l without what renderPolicies rendered: a LimitSpec built by hand,
// whose quota fields are rendered afresh from its fields on every call.
func unrendered(l *LimitSpec) *LimitSpec {
	c := *l
	c.policy, c.policyNext, c.headNext, c.sfName, c.policyOf, c.set, c.setPolicy, c.draft03Next = nil, nil, nil, 0, nil, nil, nil, nil
	return &c
}

// randomRenderConfig is a configuration of one rule with 1 to 8 limits (rates of every unit,
// calendar windows, content bytes, or one concurrency limit), an override and an overflow, in a
// random choice of header sets, with or without partition keys.
func randomRenderConfig(rnd *rand.Rand) string {
	units := []string{"s", "m", "h", "d", "month", "week"}
	var limits []string
	sets := `"max_keys": 2, "overflow": [{"rate": "7/s"}], "overrides": [{"value": "v", "limits": [{"rate": "9/m"}, {"rate": "90/h"}]}],`
	if rnd.IntN(6) == 0 {
		limits, sets = append(limits, fmt.Sprintf(`{"concurrency": %d}`, 1+rnd.IntN(50))), "" // its rule takes no other sets
	} else {
		for range 1 + rnd.IntN(8) {
			limits = append(limits, fmt.Sprintf(`{"rate": "%d/%s"}`, 1+rnd.Int64N(2_000_000_000), units[rnd.IntN(len(units))]))
		}
	}
	cost := ""
	if rnd.IntN(4) == 0 && !strings.Contains(limits[0], "concurrency") {
		cost = `"cost": {"request_bytes": true, "max": 100000},`
	}
	headers := [][]string{{"ietf"}, {"draft03"}, {"ietf", "draft03"}, {"draft03", "ietf"}}[rnd.IntN(4)]
	pk := ""
	if rnd.IntN(2) == 0 {
		pk = `, "partition_key": true, "partition_key_secret": "0123456789abcdef"`
	}
	return fmt.Sprintf(`{"response": {"rate_limit_headers": ["%s"]%s}, "rules": [{"name": "r%d", "key": [{"header": "x"}], %s %s
		"limits": [%s]}]}`, strings.Join(headers, `", "`), pk, rnd.IntN(100), cost, sets, strings.Join(limits, ", "))
}

// randomDecision is an allowed or denied decision, with or without its effective window.
func randomDecision(rnd *rand.Rand) algorithms.Decision {
	d := algorithms.Decision{Allowed: rnd.IntN(3) > 0, Remaining: rnd.Int64N(3_000_000_000) - 5, Reset: time.Duration(rnd.Int64N(int64(40 * 24 * time.Hour)))}
	if !d.Allowed {
		d.Remaining, d.RetryAfter = 0, time.Duration(1+rnd.Int64N(int64(time.Hour)))
	}
	if rnd.IntN(4) > 0 {
		d.EffectiveWindow = time.Duration(1 + rnd.Int64N(int64(48*time.Hour)))
	}
	return d
}

// The quota fields are rendered from text prepared with the configuration (each policy member, the
// start of each RateLimit member, each set's policy field in order, one encoding of a partition key
// per field): over random configurations and outcomes (one set in order, subsets, other orders,
// sets mixed, with and without partition keys), every field an allowed and a denied response carry
// is byte for byte what a fresh rendering of the same limits writes.
func TestQuotaFieldsFromPreparedTextAreWhatAFreshRenderingWrites(t *testing.T) {
	rnd := rand.New(rand.NewPCG(22, 8))
	now := time.Date(2026, 2, 14, 12, 0, 0, 0, time.UTC).UnixNano()
	wholeSets := 0
	for range 600 {
		doc := randomRenderConfig(rnd)
		c := mustParse(t, doc)
		rule := c.Rules()[0]
		var sets [][]LimitSpec
		for _, set := range append(slicesOfSets(rule.LimitSets()), rule.Overflow()) {
			if set != nil {
				sets = append(sets, set.Limits)
			}
		}
		for range 8 {
			var prepared, fresh []Outcome
			pk := c.Response.Partition(rule, []byte(fmt.Sprint(rnd.IntN(3))))
			add := func(l *LimitSpec) {
				o := Outcome{Limit: l, Decision: randomDecision(rnd), Partition: pk, Period: l.PeriodAt(now + rnd.Int64N(int64(400*24*time.Hour)))}
				prepared = append(prepared, o)
				o.Limit = unrendered(l)
				fresh = append(fresh, o)
			}
			set := sets[rnd.IntN(len(sets))]
			switch rnd.IntN(4) {
			case 0, 1: // one set, in order: the common case
				for i := range set {
					add(&set[i])
				}
				wholeSets++
			case 2: // a random order and subset of one set
				for _, i := range rnd.Perm(len(set))[:1+rnd.IntN(len(set))] {
					add(&set[i])
				}
			default: // two sets, as two rules give
				for _, s := range [][]LimitSpec{set, sets[rnd.IntN(len(sets))]} {
					for i := range s {
						add(&s[i])
					}
				}
			}
			if rnd.IntN(2) == 0 { // another rule's key: another partition key for the last one
				prepared[len(prepared)-1].Partition = c.Response.Partition(rule, []byte("other"))
				fresh[len(fresh)-1].Partition = prepared[len(prepared)-1].Partition
			}
			random := rnd.Uint64()
			got, _ := c.Response.AppendAllowed(nil, nil, prepared, random)
			want, _ := c.Response.AppendAllowed(nil, nil, fresh, random)
			require.Equal(t, fieldStrings(want), fieldStrings(got), "allowed, %s", doc)
			requireOwnPartitionKeys(t, got, prepared) // AppendAllowed sorted prepared as it wrote them
			var gotDenied, wantDenied LocalResponse
			c.Response.Deny(&gotDenied, nil, prepared, false, random)
			c.Response.Deny(&wantDenied, nil, fresh, false, random)
			require.Equal(t, fieldStrings(wantDenied.Headers), fieldStrings(gotDenied.Headers), "denied, %s", doc)
			require.Equal(t, string(wantDenied.Body), string(gotDenied.Body), "denied, %s", doc)
		}
	}
	assert.Greater(t, wholeSets, 1200, "the case of one set in order was drawn")
}

// requireOwnPartitionKeys requires each member of the structured fields to carry the partition key
// of its outcome, and none for an outcome without one.
func requireOwnPartitionKeys(t *testing.T, fields []Field, outcomes []Outcome) {
	t.Helper()
	for _, f := range fields {
		if f.Name != HeaderRateLimitPolicy && f.Name != HeaderRateLimit {
			continue
		}
		members, err := sfv.ParsePolicies(string(f.Value))
		require.NoError(t, err)
		require.Len(t, members, len(outcomes))
		for i, m := range members {
			if pk := outcomes[i].Partition; pk.set {
				assert.Equal(t, pk.sum[:], m.PartitionKey, "%s member %d", f.Name, i)
			} else {
				assert.Nil(t, m.PartitionKey, "%s member %d", f.Name, i)
			}
		}
	}
}

// slicesOfSets returns pointers to sets.
func slicesOfSets(sets []LimitSet) []*LimitSet {
	out := make([]*LimitSet, len(sets))
	for i := range sets {
		out[i] = &sets[i]
	}
	return out
}

func fieldStrings(fs []Field) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name+": "+string(f.Value))
	}
	return out
}

// The policy field of one set's limits, in configuration order and without partition keys, is the
// text rendered with the configuration itself: no member is copied. Another order is rendered.
func TestTheOutcomesOfOneSetInOrderAreGivenThePolicyFieldRenderedWithTheConfiguration(t *testing.T) {
	c := mustParse(t, `{"rules": [{"name": "r", "limits": [{"rate": "10/s"}, {"rate": "100/m"}, {"rate": "1000/h"}]}]}`)
	set := c.Rules()[0].LimitSets()[0].Limits
	decision := func(remaining int64, t time.Duration) algorithms.Decision {
		return algorithms.Decision{Allowed: true, Remaining: remaining, Reset: t, EffectiveWindow: t}
	}
	outcomes := []Outcome{
		{Limit: &set[0], Decision: decision(5, time.Second)},
		{Limit: &set[1], Decision: decision(50, time.Minute)},
		{Limit: &set[2], Decision: decision(500, time.Hour)},
	}
	fields, _ := c.Response.AppendAllowed(nil, nil, outcomes, 0)
	require.Equal(t, HeaderRateLimitPolicy, fields[0].Name)
	assert.Equal(t, `"r-0";q=10;w=1;qu="requests", "r-1";q=100;w=60;qu="requests", "r-2";q=1000;w=3600;qu="requests"`, string(fields[0].Value))
	assert.Equal(t, unsafe.SliceData(set[0].setPolicy), unsafe.SliceData(fields[0].Value), "the configuration's text itself")

	outcomes[2].Decision = decision(1, time.Hour) // now the most restrictive: first
	fields, _ = c.Response.AppendAllowed(nil, nil, outcomes, 0)
	assert.Equal(t, `"r-2";q=1000;w=3600;qu="requests", "r-0";q=10;w=1;qu="requests", "r-1";q=100;w=60;qu="requests"`, string(fields[0].Value))
	assert.Equal(t, `"r-2";r=1;t=3600, "r-0";r=5;t=1, "r-1";r=50;t=60`, string(fields[1].Value))
}

// Rendering the quota fields of several limits with partition keys, whose parameter is encoded
// once per field, allocates nothing once the buffers have room.
func TestRenderingSeveralLimitsWithPartitionKeysDoesNotAllocate(t *testing.T) {
	c := mustParse(t, `{"response": {"partition_key": true, "partition_key_secret": "0123456789abcdef", "rate_limit_headers": ["ietf", "draft03"]}, `+
		`"rules": [{"name": "r", "limits": [{"rate": "10/s"}, {"rate": "100/month"}, {"rate": "1000/h"}]}]}`)
	rule := c.Rules()[0]
	set := rule.LimitSets()[0].Limits
	pk := c.Response.Partition(rule, []byte("203.0.113.9"))
	outcomes := make([]Outcome, 3)
	fields := make([]Field, 0, 8)
	buf := make([]byte, 0, 1024)
	var lr LocalResponse
	lr.Headers = make([]Field, 0, 8)
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		for i := range outcomes {
			outcomes[i] = Outcome{Limit: &set[i], Decision: allowed(int64(4+i), time.Second), Partition: pk}
		}
		fields, buf = c.Response.AppendAllowed(fields[:0], buf[:0], outcomes, 0)
	}), "AppendAllowed")
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		outcomes[1].Decision = denied(time.Second, time.Second)
		buf = c.Response.Deny(&lr, buf[:0], outcomes, false, 0)
	}), "Deny")
}

func TestTheSecondsOfAnEffectiveWindowAreCeilSecondsOfIt(t *testing.T) {
	rnd := rand.New(rand.NewPCG(22, 6))
	edges := []time.Duration{1, time.Second - 1, time.Second, time.Second + 1, 1 << 53, 1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64,
		1e18, 1e18 + 1, 1e18 - 1}
	for _, d := range edges {
		require.Equal(t, ceilSeconds(d), ceilSecondsOf(d), "%d", d)
	}
	for range 1_000_000 {
		d := max(time.Duration(rnd.Uint64()>>uint(1+rnd.IntN(63))), 1)
		if got, want := ceilSecondsOf(d), ceilSeconds(d); got != want {
			require.Equal(t, want, got, "%d", d)
		}
	}
}

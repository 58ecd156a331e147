//go:build !tinygo

package filter

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// The body the filter sends for a check is what the service decodes, descriptor by descriptor
// and field by field, whatever the key values hold.
func TestTheFiltersCheckBodyIsWhatTheServiceDecodes(t *testing.T) {
	tenant := &ruleState{rule: &rules.Rule{Name: "per-tenant"}}
	ip := &ruleState{rule: &rules.Rule{Name: "per-ip"}}
	items := []globalItem{
		{rs: tenant, key: "acme \"corp\"", cost: 3, spec: []rules.LimitSpec{
			{Limit: algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Second, Burst: 250}, Fingerprint: 77},
			{Limit: algorithms.Limit{Kind: algorithms.SlidingLog, Quota: 10000, Window: time.Hour}, Fingerprint: 78},
		}},
		{rs: ip, key: "a\u0085b", cost: 1, spec: []rules.LimitSpec{
			{Limit: algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Minute}, Fingerprint: 1<<64 - 1},
		}},
	}
	body := appendCheckBody(nil, "ns.meshlimit", items)
	var req wire.Request
	require.NoError(t, wire.DecodeRequest(body, wire.DecodeOptions{}, &req), "%s", body)
	require.Len(t, req.Descriptors, descriptorCount(items))
	j := 0
	for _, it := range items {
		for _, spec := range it.spec {
			d := req.Descriptors[j]
			j++
			prefix := "ns.meshlimit/" + it.rs.rule.Name + "/" + strconv.FormatUint(spec.Fingerprint, 36) + "/"
			assert.Contains(t, d.Key, prefix)
			assert.Equal(t, spec.Limit, d.Limit)
			assert.Equal(t, it.cost, d.Cost)
		}
	}
	assert.Equal(t, "ns.meshlimit/per-tenant/25/acme \"corp\"", req.Descriptors[0].Key)
	assert.Regexp(t, `^ns\.meshlimit/per-ip/3w5e11264sgsf/#[0-9a-f]+-[0-9a-f]+$`, req.Descriptors[2].Key, "a value with a C1 control character is sent hashed")
}

// The configuration's default path is the contract's.
func TestTheDefaultGlobalPathIsTheContractsPath(t *testing.T) {
	assert.Equal(t, wire.Path, rules.DefaultGlobalPath)
}

// A global concurrency limit is sent as a permit descriptor with its item's permit id and the
// permit lease, next to the rate descriptors of the same check.
func TestAGlobalConcurrencyLimitIsSentAsAPermit(t *testing.T) {
	rate := &ruleState{rule: &rules.Rule{Name: "per-tenant"}}
	gpu := &ruleState{rule: &rules.Rule{Name: "gpu"}}
	items := []globalItem{
		{rs: rate, key: "acme", cost: 1, spec: []rules.LimitSpec{{Limit: algorithms.Limit{Kind: algorithms.FixedWindow, Quota: 5, Window: time.Minute}, Fingerprint: 9}}},
		{rs: gpu, key: "acme", cost: 1, permit: "k3/7/abc", spec: []rules.LimitSpec{{Concurrency: 20, Fingerprint: 10}}},
	}
	require.False(t, isConcurrency(items[0].spec))
	require.True(t, isConcurrency(items[1].spec))
	body := appendCheckBody(nil, "ns.meshlimit", items)
	var req wire.Request
	require.NoError(t, wire.DecodeRequest(body, wire.DecodeOptions{}, &req), "%s", body)
	require.Len(t, req.Descriptors, 2)
	assert.Empty(t, req.Descriptors[0].Permit)
	assert.Equal(t, wire.Descriptor{Key: "ns.meshlimit/gpu/a/acme", Limit: algorithms.Limit{Quota: 20}, Cost: 1,
		Permit: "k3/7/abc", Lease: globalPermitLease}, req.Descriptors[1])
}

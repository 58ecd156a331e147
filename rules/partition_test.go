package rules

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/sfv"
)

const pkRules = `"rules": [{"name": "api", "limits": [{"rate": "5/m", "name": "burst"}]},
	{"name": "other", "limits": [{"rate": "10/m", "name": "calm"}]}]`

// pkFields renders the quota fields of one allowed request of key on rule i of the configuration
// whose response object is response, and parses both ietf fields.
func pkFields(t *testing.T, response string, i int, key string) (policy, state sfv.Policy) {
	t.Helper()
	c := mustParse(t, `{"response": `+response+`, `+pkRules+`}`)
	rule := c.Rules()[i]
	set, _ := rule.Limits([]byte(key))
	out := []Outcome{{Limit: &set.Limits[0], Decision: allowed(4, time.Second), Partition: c.Response.Partition(rule, []byte(key))}}
	fields, _ := c.Response.AppendAllowed(nil, nil, out, 0)
	pol, ok := header(t, fields, HeaderRateLimitPolicy)
	require.True(t, ok)
	rl, ok := header(t, fields, HeaderRateLimit)
	require.True(t, ok)
	ps, err := sfv.ParsePolicies(pol)
	require.NoError(t, err)
	rs, err := sfv.ParsePolicies(rl)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Len(t, rs, 1)
	return ps[0], rs[0]
}

func TestThePartitionKeyIsLeftOutUnlessConfigured(t *testing.T) {
	pol, rl := pkFields(t, `{}`, 0, "203.0.113.9")
	assert.Nil(t, pol.PartitionKey)
	assert.Nil(t, rl.PartitionKey)
}

func TestThePartitionKeyIsAnEightByteSequenceOnBothFieldsAndNeverTheKey(t *testing.T) {
	pol, rl := pkFields(t, `{"partition_key": true}`, 0, "203.0.113.9")
	require.Len(t, pol.PartitionKey, 8)
	assert.Equal(t, pol.PartitionKey, rl.PartitionKey, "one partition, one pk on both fields")
	assert.False(t, bytes.Contains([]byte("203.0.113.9"), pol.PartitionKey))
	assert.NotContains(t, string(pol.PartitionKey), "203")
}

func TestThePartitionKeyNamesOnePartition(t *testing.T) {
	secret := `{"partition_key": true, "partition_key_secret": "0123456789abcdef-one"}`
	pk := func(response string, rule int, key string) []byte {
		p, _ := pkFields(t, response, rule, key)
		return p.PartitionKey
	}
	base := pk(secret, 0, "203.0.113.9")
	tests := []struct {
		name string
		same bool
		got  []byte
	}{
		{"the same key on the same rule gets the same pk", true, pk(secret, 0, "203.0.113.9")},
		{"a neighbouring address gets another pk", false, pk(secret, 0, "203.0.113.10")},
		{"the same key on another rule gets another pk", false, pk(secret, 1, "203.0.113.9")},
		{"another secret gives the same key another pk", false, pk(`{"partition_key": true, "partition_key_secret": "0123456789abcdef-two"}`, 0, "203.0.113.9")},
		{"without a secret the same key gets another pk", false, pk(`{"partition_key": true}`, 0, "203.0.113.9")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.same, bytes.Equal(base, tt.got))
		})
	}
}

func TestAGuessedAddressCannotBeConfirmedWithoutTheSecret(t *testing.T) {
	// An attacker who knows the configuration but not the secret recomputes the pk of a guessed
	// address as an unkeyed deployment would: it does not match the one served.
	served, _ := pkFields(t, `{"partition_key": true, "partition_key_secret": "a-secret-of-the-operator"}`, 0, "198.51.100.23")
	guess, _ := pkFields(t, `{"partition_key": true}`, 0, "198.51.100.23")
	assert.NotEqual(t, served.PartitionKey, guess.PartitionKey)
}

func TestPartitionKeySettingsAreChecked(t *testing.T) {
	tests := []struct {
		name     string
		response string
	}{
		{"a secret shorter than 16 bytes is refused", `{"partition_key": true, "partition_key_secret": "short"}`},
		{"a secret longer than 256 bytes is refused", `{"partition_key": true, "partition_key_secret": "` + string(bytes.Repeat([]byte("x"), 257)) + `"}`},
		{"a secret without partition_key is refused", `{"partition_key_secret": "0123456789abcdef"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(`{"response": ` + tt.response + `, ` + pkRules + `}`))
			require.Error(t, err)
			var paths []string
			for _, fe := range fieldErrors(t, err) {
				paths = append(paths, fe.Path)
			}
			assert.Equal(t, []string{"response.partition_key_secret"}, paths, "%v", err)
		})
	}
}

func TestRenderingWithPartitionKeysDoesNotAllocate(t *testing.T) {
	c := mustParse(t, `{"response": {"partition_key": true, "partition_key_secret": "0123456789abcdef"}, `+pkRules+`}`)
	rule := c.Rules()[0]
	set, _ := rule.Limits([]byte("k"))
	key := []byte("203.0.113.9")
	outcomes := make([]Outcome, 1)
	fields := make([]Field, 0, 8)
	buf := make([]byte, 0, 512)
	var lr LocalResponse
	lr.Headers = make([]Field, 0, 8)
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		outcomes[0] = Outcome{Limit: &set.Limits[0], Decision: allowed(4, time.Second), Partition: c.Response.Partition(rule, key)}
		fields, buf = c.Response.AppendAllowed(fields[:0], buf[:0], outcomes, 0)
	}), "AppendAllowed")
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		outcomes[0] = Outcome{Limit: &set.Limits[0], Decision: denied(time.Second, time.Second), Partition: c.Response.PartitionString(rule, "203.0.113.9")}
		buf = c.Response.Deny(&lr, buf[:0], outcomes, false, 0)
	}), "Deny")
}

// BenchmarkPartition is the cost pk adds to each rule that applies to a request.
func BenchmarkPartition(b *testing.B) {
	c := mustParse(b, `{"response": {"partition_key": true, "partition_key_secret": "0123456789abcdef"}, `+pkRules+`}`)
	rule, key := c.Rules()[0], []byte("2001:db8:1234:5678::/64")
	b.ReportAllocs()
	for b.Loop() {
		_ = c.Response.Partition(rule, key)
	}
}

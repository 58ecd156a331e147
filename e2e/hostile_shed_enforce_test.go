package e2e

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// Issue 20 review, E3: enforce_percent on a key the client writes (x-user). Without a secret, the
// values in shadow are public (FNV-1a of the shedder's name and the value): a client that uses
// only those is never shed. Under enforce_secret it cannot tell them apart.
func TestAClientThatUsesOnlyTheUserValuesItComputedAsShadowIsShedUnderAnEnforceSecret(t *testing.T) {
	const shed = `"capacity":1,"classes":[{"name":"only"}],"default_class":"only","enforce_percent":50,"key":[{"header":"x-user"}]`
	user := func(i int) *envoyhost.Request {
		return get("api.example", "/", "198.51.100.66", [2]string{"x-user", "u" + strconv.Itoa(i)})
	}
	// admitted opens a stream that fills the capacity, then reports which of values are admitted past it.
	admitted := func(fields string, values []int) []int {
		p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],"shed":{`+fields+`}}`, 1)
		_, ok := openStream(t, p.VM(0), get("api.example", "/", "192.0.2.1", [2]string{"x-user", "victim"}))
		require.True(t, ok)
		var in []int
		for _, i := range values {
			if _, ok := openStream(t, p.VM(0), user(i)); ok {
				in = append(in, i)
			}
		}
		return in
	}
	all := make([]int, 200)
	for i := range all {
		all[i] = i
	}
	shadow := admitted(shed, all) // what the client can compute offline without the secret
	require.NotEmpty(t, shadow)
	keyed := admitted(shed+`,"enforce_secret":"a secret of the proxies, 32 bytes"`, shadow)
	t.Logf("%d of 200 values computed as shadow; under the secret %d of them admitted", len(shadow), len(keyed))
	assert.InDelta(t, len(shadow)/2, len(keyed), float64(len(shadow))/5, "about half of the chosen values are enforced, and shed")
}

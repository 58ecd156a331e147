package e2e

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// holdBodies opens, round-robin across p's workers, one request body that never ends from each
// source address (host:port as Envoy gives it), and returns how many the shedder admitted.
func holdBodies(t *testing.T, p *envoyhost.Plugin, sources []string) int {
	t.Helper()
	held := 0
	for i, src := range sources {
		s := p.VM(i % 4).NewStream(envoyhost.StreamInfo{SourceAddress: src})
		_, err := s.SendRequestHeaders(get("api.example", "/upload", "").Headers, false)
		require.NoError(t, err)
		if s.LocalReply() == nil {
			held++
		}
	}
	return held
}

// TestAClientRotatingThroughItsIPv6PrefixHoldsOnlyOneKeyShareOfTheShedder: issue 20, a client of
// one IPv6 /64 (which a single host is given) that sends each held body from another address of
// it. key_share counts by share_key, client_ip by default, and a client_ip key part masks IPv6 to
// ipv6_mask (64 by default) as it does in rate rules: the thousand addresses are one share value
// and hold KeySlots (10% of 100: 10) of the shedder across four workers. With ipv6_mask 128 (the
// control) every address is a value of its own and the same client takes all that default may
// hold (90 of 100: critical's reserve is kept from it).
func TestAClientRotatingThroughItsIPv6PrefixHoldsOnlyOneKeyShareOfTheShedder(t *testing.T) {
	sources := make([]string, 1000)
	for i := range sources {
		sources[i] = fmt.Sprintf("[2001:db8:66:1:%x:%x::%x]:40000", i/7, i%7, i+1)
	}
	for _, tt := range []struct {
		name, shareKey string
		held           int
	}{
		{"the default share_key, client_ip masked to its /64", ``, 10},
		{"a client_ip share_key of ipv6_mask 64, said", `,"share_key":[{"client_ip":{"ipv6_mask":64}}]`, 10},
		{"the control: ipv6_mask 128 gives each address a share of its own", `,"share_key":[{"client_ip":{"ipv6_mask":128}}]`, 90},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
				"shed":{"capacity":100,"key_share":100` + tt.shareKey + `}}`
			p := load(t, module(t, "meshlimit"), cfg, 4)
			held := holdBodies(t, p, sources)
			assert.Equal(t, tt.held, held)
			t.Logf("%s: %d of 1000 bodies from one /64 held", tt.name, held)
			if tt.held == 10 {
				_, ok := openStream(t, p.VM(1), get("api.example", "/", "2001:db8:66:2::1"))
				assert.True(t, ok, "the next /64 is another client")
			}
		})
	}
}

// TestAnIPv4ClientAndItsIPv4MappedIPv6SpellingShareOneKeyShare: the same address seen as
// 198.51.100.66 and as ::ffff:198.51.100.66 (a dual-stack listener) is one share_key value, and
// an IPv4 client's /32 is not widened: its neighbour keeps a share of its own.
func TestAnIPv4ClientAndItsIPv4MappedIPv6SpellingShareOneKeyShare(t *testing.T) {
	cfg := `{"rules":[{"name":"all","limits":[{"rate":"1000000/s"}]}],
		"shed":{"capacity":100,"key_share":100}}`
	p := load(t, module(t, "meshlimit"), cfg, 4)
	sources := make([]string, 200)
	for i := range sources {
		sources[i] = "198.51.100.66:" + strconv.Itoa(40000+i)
		if i%2 == 1 {
			sources[i] = "[::ffff:198.51.100.66]:" + strconv.Itoa(40000+i)
		}
	}
	assert.Equal(t, 10, holdBodies(t, p, sources), "both spellings hold one share")
	assert.Equal(t, 10, holdBodies(t, p, []string{"198.51.100.67:1", "198.51.100.67:2", "198.51.100.67:3", "198.51.100.67:4",
		"198.51.100.67:5", "198.51.100.67:6", "198.51.100.67:7", "198.51.100.67:8", "198.51.100.67:9", "198.51.100.67:10", "198.51.100.67:11"}),
		"the next address is another client, with a share of its own")
}

package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
)

// countingSource is a TLSSource that counts its calls and gives the PKI's client configuration.
func countingSource(pki *redistest.PKI, n *atomic.Int32) func() *tls.Config {
	return func() *tls.Config { n.Add(1); return pki.ClientConfig() }
}

// Through Sentinel over TLS, every new connection takes its TLS configuration from its source:
// the sentinels' from Sentinel.TLSSource, the master's from Config.TLSSource (so files rotated
// on disk reach both without a restart).
func TestEveryNewSentinelAndMasterConnectionTakesItsTLSFromItsSource(t *testing.T) {
	t.Parallel()
	pki := redistest.NewPKI(t)
	set := redistest.StartSentinel(t, redistest.SentinelConfig{TLS: pki})
	var nodes, sentinels atomic.Int32
	cfg := sentinelConfig(set, redistest.SentinelConfig{}, pki.ClientConfig())
	cfg.TLSSource = countingSource(pki, &nodes)
	cfg.Sentinel.TLS, cfg.Sentinel.TLSSource = pki.ClientConfig(), countingSource(pki, &sentinels)
	s := openStore(t, cfg)
	require.NoError(t, s.Ping(context.Background()))
	assert.Positive(t, nodes.Load(), "the master's connections")
	assert.Positive(t, sentinels.Load(), "the sentinels' connections")
}

// A failed connection to a sentinel is a *DialError marked Sentinel, so that the caller names
// the sentinels' settings: here TLS to a sentinel that holds no certificate for the name asked.
func TestAFailedSentinelConnectionSaysItIsASentinels(t *testing.T) {
	t.Parallel()
	pki := redistest.NewPKI(t)
	set := redistest.StartSentinel(t, redistest.SentinelConfig{TLS: pki})
	cfg := sentinelConfig(set, redistest.SentinelConfig{}, pki.ClientConfig())
	wrong := pki.ClientConfig()
	wrong.ServerName = "nope.example"
	cfg.Sentinel.TLS = wrong
	_, err := New(cfg)
	var dial *DialError
	require.True(t, errors.As(err, &dial), "%v", err)
	assert.True(t, dial.Sentinel)
}

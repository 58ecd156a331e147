package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
)

// A -redis list with an empty entry, an address twice, a URL or no port is a usage error
// naming the entry, not a connection that fails later or switches to Cluster mode.
func TestRedisAddressMistakesAreRefusedByName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, addrs, want string }{
		{"a trailing comma is refused", "127.0.0.1:6379,", "-redis 127.0.0.1:6379,: an empty address (a trailing or doubled comma)"},
		{"a doubled comma is refused", "a:1,,b:2", "an empty address"},
		{"an address given twice is refused", "a:1,a:1", "-redis a:1: given twice"},
		{"a redis URL is refused naming the flags", "redis://a:6379", "-redis redis://a:6379: give host:port, not a URL"},
		{"a rediss URL names -redis-tls", "rediss://user:pw@a:6380", "TLS (rediss://) is -redis-tls"},
		{"an address without a port is refused", "redis.example", "-redis redis.example: want host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := realMain(context.Background(), []string{"-redis", tc.addrs}, func(string) string { return "" }, &stdout, &stderr)
			assert.Equal(t, 2, code)
			assert.Contains(t, stderr.String(), tc.want)
		})
	}
}

// A certificate that has expired is named as expired: the server's (to renew on the server),
// and the client's, refused at start with its dates.
func TestAnExpiredCertificateIsNamedAsExpired(t *testing.T) {
	t.Parallel()
	pki := redistest.NewPKI(t)
	past := time.Now().Add(-time.Hour)
	cert, key := pki.IssueValid(t, past.Add(-time.Hour), past, "expired-server", "redis", "127.0.0.1")
	expiredServer := redistest.StartTLS(t, redistest.TLS{PKI: pki, Cert: cert, Key: key})
	mutual := redistest.StartTLS(t, redistest.TLS{PKI: pki, AuthClients: true})
	clientCert, clientKey := pki.IssueValid(t, past.Add(-time.Hour), past, "expired-client", "meshlimit")
	other, otherKey := pki.Issue(t, "other-name", "redis", "other.example")
	otherName := redistest.StartTLS(t, redistest.TLS{PKI: pki, Cert: other, Key: otherKey})
	for _, tc := range []struct {
		name      string
		args      []string
		want, not string
	}{
		{"an expired server certificate is named as expired", []string{"-redis", expiredServer.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA},
			"the Redis certificate has expired or is not valid yet: renew it on the server, or check this host's clock", "-redis-tls-ca"},
		{"an expired client certificate is named as expired", []string{"-redis", mutual.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA, "-redis-tls-cert", clientCert, "-redis-tls-key", clientKey},
			"-redis-tls-cert " + clientCert + ": the client certificate expired at " + past.UTC().Format(time.RFC3339), "no CA it trusts"},
		{"a certificate with other names gets no hint to skip the name check", []string{"-redis", otherName.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA},
			"-redis-tls-server-name: the Redis certificate is not for 127.0.0.1: give a name it holds", "-redis-tls-verify chain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, line := refusal(t, tc.args...)
			assert.NotEqual(t, 0, code)
			assert.Contains(t, line, tc.want)
			assert.NotContains(t, line, tc.not)
		})
	}
}

// Refused credentials name the flag of the password Redis or the sentinels refused, and a
// sentinel given as a Redis (no -redis-sentinel-master) is refused at start saying so.
func TestRefusedCredentialsAndASentinelAsRedisNameTheFlagToFix(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--requirepass", "s3cret")
	set := redistest.StartSentinel(t, redistest.SentinelConfig{Password: "pw", SentinelPassword: "spw"})
	pw, spw, wrong := writeFile(t, "pw", "pw\n"), writeFile(t, "spw", "spw"), writeFile(t, "wrong", "nope\n\n")
	sentinels := strings.Join(set.Addrs(), ",")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no password for a Redis that requires one names -redis-password-file", []string{"-redis", srv.Addr()},
			"-redis-password-file: Redis requires a password and none was given (or MESHLIMIT_REDIS_PASSWORD)"},
		{"a wrong password names -redis-password-file and -redis-username", []string{"-redis", srv.Addr(), "-redis-password-file", wrong},
			"-redis-password-file and -redis-username: Redis refused them"},
		{"no sentinel password names -redis-sentinel-password-file", []string{"-redis", sentinels, "-redis-sentinel-master", redistest.MasterName, "-redis-password-file", pw},
			"-redis-sentinel-password-file: the sentinels require a password"},
		{"a wrong sentinel password names -redis-sentinel-password-file", []string{"-redis", sentinels, "-redis-sentinel-master", redistest.MasterName, "-redis-password-file", pw, "-redis-sentinel-password-file", wrong},
			"-redis-sentinel-password-file and -redis-sentinel-username: the sentinels refused them"},
		{"no master password through sentinels names -redis-password-file", []string{"-redis", sentinels, "-redis-sentinel-master", redistest.MasterName, "-redis-sentinel-password-file", spw},
			"-redis-password-file: Redis requires a password"},
		{"a sentinel without -redis-sentinel-master is refused", []string{"-redis", set.Sentinels[0].Addr(), "-redis-password-file", spw},
			"-redis-sentinel-master: " + set.Sentinels[0].Addr() + " is a Redis Sentinel, not a Redis"},
		{"TLS to plain sentinels names -redis-sentinel-tls", []string{"-redis", sentinels, "-redis-sentinel-master", redistest.MasterName, "-redis-password-file", pw, "-redis-sentinel-password-file", spw, "-redis-tls"},
			"-redis-sentinel-tls: no TLS handshake from the sentinel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, line := refusal(t, tc.args...)
			assert.NotEqual(t, 0, code)
			assert.Contains(t, line, tc.want)
		})
	}
}

// A TLS sentinel whose certificate does not hold the name asked names
// -redis-sentinel-tls-server-name and the sentinel's certificate, not the master's flag.
func TestASentinelCertificateMismatchNamesTheSentinelFlag(t *testing.T) {
	t.Parallel()
	pki := redistest.NewPKI(t)
	set := redistest.StartSentinel(t, redistest.SentinelConfig{TLS: pki})
	_, line := refusal(t, "-redis", strings.Join(set.Addrs(), ","), "-redis-sentinel-master", redistest.MasterName,
		"-redis-tls", "-redis-tls-ca", pki.CA, "-redis-tls-cert", pki.ClientCert, "-redis-tls-key", pki.ClientKey,
		"-redis-sentinel-tls-server-name", "nope.example")
	assert.Contains(t, line, "-redis-sentinel-tls-server-name: the sentinel's certificate is not for nope.example")
}

// An address where something accepts connections but never answers is refused within the
// dial timeout with a line that says so, not a bare "context deadline exceeded".
func TestASilentAddressIsRefusedSayingNothingAnswered(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn // held open, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	_, line := refusal(t, "-redis", ln.Addr().String())
	assert.Contains(t, line, "-redis "+ln.Addr().String()+": no answer within the dial timeout")
}

package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
)

// checkBody is a check of one unit of key against a sliding log of quota units (at most 10^4)
// per 400 days: a count no window boundary resets while a test runs, as a fixed window's
// would at the turn of its period.
func checkBody(key string, quota int) string {
	return `{"descriptors":[{"key":"` + key + `","algorithm":"sliding_log","quota":` + itoa(quota) + `,"window_ms":34560000000}]}`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// decide posts one check of key (quota 1 an hour) to the service at addr and returns whether
// it was allowed; any answer but a 200 fails the test.
func decide(t *testing.T, addr, key string) bool {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(checkBody(key, 1)))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var a struct{ Allowed bool }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a))
	return a.Allowed
}

// startPatient runs the service as startService does, with a store deadline that no loaded
// machine reaches: tests of what the service decides must not depend on its speed.
func startPatient(t *testing.T, args ...string) string {
	return startService(t, append(args, "-timeout", "10s")...)
}

// refusal runs the binary with args and a context that has ended, so that it stops once it
// has opened its store, and returns its exit code and what it wrote on stderr.
func refusal(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := realMain(ctx, append(args, "-listen", "127.0.0.1:0", "-log-level", "error", "-shutdown-drain", "0"), func(string) string { return "" }, &stdout, &stderr)
	if code != 0 {
		assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
	}
	return code, stderr.String()
}

// Checks are decided over TLS: against the CA of -redis-tls-ca, the name of the address or of
// -redis-tls-server-name (sent as SNI), a client certificate where Redis asks for one.
func TestChecksAreDecidedOverTLS(t *testing.T) {
	t.Parallel()
	pki := redistest.NewPKI(t)
	plain := redistest.StartTLS(t, redistest.TLS{PKI: pki})
	mutual := redistest.StartTLS(t, redistest.TLS{PKI: pki, AuthClients: true})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"the address's name", []string{"-redis", plain.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA}},
		{"a server name", []string{"-redis", plain.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA, "-redis-tls-server-name", redistest.ServerName}},
		{"TLS 1.3 at least", []string{"-redis", plain.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA, "-redis-tls-min-version", "1.3"}},
		{"a client certificate", []string{"-redis", mutual.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA, "-redis-tls-cert", pki.ClientCert, "-redis-tls-key", pki.ClientKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startPatient(t, tc.args...)
			key := "tls " + tc.name
			assert.True(t, decide(t, addr, key))
			assert.False(t, decide(t, addr, key), "the second of a quota of 1 is denied: the count is in Redis")
		})
	}
	n, err := mutual.Do("DBSIZE")
	require.NoError(t, err)
	assert.Equal(t, "1", n, "the state is in the TLS Redis")
}

// A Redis TLS connection the flags do not allow is refused at start, in one line that names
// the flag to fix.
func TestARefusedRedisTLSConnectionNamesTheFlagToFix(t *testing.T) {
	t.Parallel()
	pki, other := redistest.NewPKI(t), redistest.NewPKI(t)
	srv := redistest.StartTLS(t, redistest.TLS{PKI: pki})
	mutual := redistest.StartTLS(t, redistest.TLS{PKI: pki, AuthClients: true})
	tls12 := redistest.StartTLS(t, redistest.TLS{PKI: pki, Protocols: "TLSv1.2"})
	plainRedis := redistest.Start(t)
	tlsFlags := func(addr string, more ...string) []string {
		return append([]string{"-redis", addr, "-redis-tls", "-redis-tls-ca", pki.CA}, more...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"a certificate of another CA", []string{"-redis", srv.Addr(), "-redis-tls", "-redis-tls-ca", other.CA}, []string{"-redis-tls-ca " + other.CA + ": the Redis certificate is not signed by a CA in it", "unknown authority"}},
		{"a private CA without -redis-tls-ca", []string{"-redis", srv.Addr(), "-redis-tls"}, []string{"-redis-tls-ca: the Redis certificate is not signed by a CA the system trusts"}},
		{"a name the certificate does not hold", tlsFlags(srv.Addr(), "-redis-tls-server-name", "other.example"), []string{"-redis-tls-server-name: the Redis certificate is not for other.example"}},
		{"no client certificate", tlsFlags(mutual.Addr()), []string{"-redis-tls-cert: Redis closed the TLS connection as it does to a client without a certificate"}},
		{"a client certificate of another CA", tlsFlags(mutual.Addr(), "-redis-tls-cert", other.ClientCert, "-redis-tls-key", other.ClientKey), []string{"-redis-tls-cert " + other.ClientCert + ": Redis closed the TLS connection"}},
		{"a Redis below the minimum version", tlsFlags(tls12.Addr(), "-redis-tls-min-version", "1.3"), []string{"-redis-tls-min-version 1.3: Redis offers no TLS version from 1.3 up"}},
		{"a plain client on a TLS port", []string{"-redis", srv.Addr()}, []string{"-redis-tls: Redis closed the connection, as a TLS port does to a plain client"}},
		{"a TLS client on a plain port", tlsFlags(plainRedis.Addr()), []string{"-redis-tls: no TLS handshake within the dial timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, line := refusal(t, tc.args...)
			assert.Equal(t, 1, code)
			assert.True(t, strings.HasPrefix(line, "meshlimit-service: -redis "), "%q", line)
			for _, w := range tc.want {
				assert.Contains(t, line, w)
			}
		})
	}
	code, _ := refusal(t, tlsFlags(tls12.Addr(), "-redis-tls-min-version", "1.2")...)
	assert.Equal(t, 0, code, "TLS 1.2 is the default minimum")
}

// A certificate that names its server in the Common Name only (no subject alternative name:
// Go verifies names there only) is accepted with -redis-tls-verify chain, which still
// verifies that the CA signed it.
func TestChainVerificationAcceptsACommonNameCertificateOfTheCAOnly(t *testing.T) {
	t.Parallel()
	pki, other := redistest.NewPKI(t), redistest.NewPKI(t)
	cert, key := pki.Issue(t, "cn-only", "127.0.0.1")
	srv := redistest.StartTLS(t, redistest.TLS{PKI: pki, Cert: cert, Key: key})

	_, line := refusal(t, "-redis", srv.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA)
	assert.Contains(t, line, "-redis-tls-server-name: the Redis certificate is not for 127.0.0.1: give a name it holds, or -redis-tls-verify chain")
	assert.Contains(t, line, "legacy Common Name field")

	addr := startPatient(t, "-redis", srv.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA, "-redis-tls-verify", "chain")
	assert.True(t, decide(t, addr, "cn"))
	assert.False(t, decide(t, addr, "cn"))

	_, line = refusal(t, "-redis", srv.Addr(), "-redis-tls", "-redis-tls-ca", other.CA, "-redis-tls-verify", "chain")
	assert.Contains(t, line, "-redis-tls-ca "+other.CA+": the Redis certificate is not signed by a CA in it")
}

// writeFile writes s to a file of the test and returns its path.
func writeFile(t *testing.T, name, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(s), 0o600))
	return p
}

// The Redis password comes from a file (a mounted secret, not the command line), less its
// trailing newline.
func TestTheRedisPasswordComesFromAFile(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--requirepass", "s3cret")
	addr := startPatient(t, "-redis", srv.Addr(), "-redis-password-file", writeFile(t, "password", "s3cret\n"))
	assert.True(t, decide(t, addr, "pw"))
	assert.False(t, decide(t, addr, "pw"))

	_, line := refusal(t, "-redis", srv.Addr(), "-redis-password-file", writeFile(t, "wrong", "nope"))
	assert.Contains(t, line, "WRONGPASS")
	assert.NotContains(t, line, "nope", "the error does not repeat the password")
}

// A Redis flag that does nothing without another, a secret given twice, or a file that
// cannot be read is a usage error (exit 2) naming the flags.
func TestRedisFlagsThatCannotWorkAreRefusedByName(t *testing.T) {
	t.Parallel()
	empty := writeFile(t, "empty", "\n")
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-redis-tls"}, nil, "-redis-tls: needs -redis"},
		{[]string{"-redis-username", "u"}, nil, "-redis-username: needs -redis"},
		{nil, map[string]string{"MESHLIMIT_REDIS_PASSWORD": "p"}, "MESHLIMIT_REDIS_PASSWORD: needs -redis"},
		{[]string{"-redis", "a:1", "-redis-tls-ca", "ca.pem"}, nil, "-redis-tls-ca: needs -redis-tls"},
		{[]string{"-redis", "a:1", "-redis-tls-min-version", "1.3"}, nil, "-redis-tls-min-version: needs -redis-tls"},
		{[]string{"-redis", "a:1", "-redis-tls", "-redis-tls-cert", "c.pem"}, nil, "-redis-tls-cert and -redis-tls-key: give both or neither"},
		{[]string{"-redis", "a:1", "-redis-tls", "-redis-tls-min-version", "1.1"}, nil, `-redis-tls-min-version: want 1.2 or 1.3, got "1.1"`},
		{[]string{"-redis", "a:1", "-redis-tls", "-redis-tls-verify", "none"}, nil, `-redis-tls-verify: want full or chain, got "none"`},
		{[]string{"-redis", "a:1", "-redis-tls"}, map[string]string{"MESHLIMIT_REDIS_TLS_MIN_VERSION": "1.1"}, `MESHLIMIT_REDIS_TLS_MIN_VERSION: want 1.2 or 1.3, got "1.1"`},
		{[]string{"-redis", "a:1", "-redis-sentinel-username", "u"}, nil, "-redis-sentinel-username: needs -redis-sentinel-master"},
		{[]string{"-redis", "a:1", "-redis-sentinel-master", "m", "-redis-sentinel-tls-server-name", "s"}, nil, "-redis-sentinel-tls-server-name: needs -redis-tls"},
		{[]string{"-redis", "a:1", "-redis-password-file", empty}, map[string]string{"MESHLIMIT_REDIS_PASSWORD": "p"}, "MESHLIMIT_REDIS_PASSWORD and -redis-password-file: give one"},
		{[]string{"-redis", "a:1", "-redis-password-file", empty}, nil, "-redis-password-file " + empty + ": empty"},
		{[]string{"-redis", "a:1", "-redis-password-file", "/no/such/file"}, nil, "-redis-password-file: open /no/such/file"},
		{[]string{"-redis", "a:1", "-redis-tls", "-redis-tls-ca", empty}, nil, "-redis-tls-ca " + empty + ": no PEM certificate in it"},
		{[]string{"-redis", "a:1", "-redis-tls", "-redis-tls-cert", empty, "-redis-tls-key", empty}, nil, "-redis-tls-cert and -redis-tls-key: tls: failed to find any PEM data"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := realMain(context.Background(), tc.args, func(k string) string { return tc.env[k] }, &stdout, &stderr)
			assert.Equal(t, 2, code)
			assert.True(t, strings.HasPrefix(stderr.String(), "meshlimit-service: "+tc.want), "%q should start with %q", stderr.String(), tc.want)
		})
	}
}

// -h lists the Redis flags with their types, and the passwords' variables.
func TestDashHListsTheRedisFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, realMain(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr))
	for _, want := range []string{
		"  -redis addresses\n", "  -redis-username user\n", "  -redis-password-file file\n", "  -redis-tls\n",
		"  -redis-tls-ca file\n", "  -redis-tls-cert file\n", "  -redis-tls-key file\n", "  -redis-tls-server-name name\n",
		"  -redis-tls-min-version version\n", "(default 1.2)", "  -redis-tls-verify mode\n", "(default full)",
		"  -redis-sentinel-master name\n", "  -redis-sentinel-username user\n", "  -redis-sentinel-password-file file\n",
		"  -redis-sentinel-tls\n", "  -redis-sentinel-tls-server-name name\n",
		"MESHLIMIT_REDIS_PASSWORD ", "MESHLIMIT_REDIS_SENTINEL_PASSWORD ",
	} {
		assert.Contains(t, stdout.String(), want)
	}
}

// An image without a base has no CA certificates: -redis-tls without -redis-tls-ca then says
// so at start, instead of every handshake failing.
func TestTLSWithoutACAOnASystemWithoutCAsIsRefusedAtStart(t *testing.T) {
	systemRoots = func() (*x509.CertPool, error) { return x509.NewCertPool(), nil }
	t.Cleanup(func() { systemRoots = x509.SystemCertPool })
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, realMain(context.Background(), []string{"-redis", "127.0.0.1:1", "-redis-tls"}, func(string) string { return "" }, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-redis-tls-ca: none given, and the system has no CA certificates")
}

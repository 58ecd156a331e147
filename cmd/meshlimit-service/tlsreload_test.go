package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/redistest"
)

// copyFiles copies each of src into a directory of the test, as a mounted Secret's files, and
// returns their new paths.
func copyFiles(t *testing.T, dir string, src ...string) []string {
	t.Helper()
	var out []string
	for _, s := range src {
		out = append(out, filepath.Join(dir, filepath.Base(s)))
		replaceFile(t, out[len(out)-1], s)
	}
	return out
}

// replaceFile writes the bytes of src over dst, as a rotation does.
func replaceFile(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dst, b, 0o600))
}

// bundle writes the concatenation of the PEM files pems and returns its path.
func bundle(t *testing.T, pems ...string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range pems {
		s, err := os.ReadFile(p)
		require.NoError(t, err)
		b.Write(s)
	}
	return writeFile(t, "bundle.pem", b.String())
}

// reconnect runs cmds on srv, then closes every client connection but its own (as a Redis
// restart or a network blip does), so that the service dials anew.
func reconnect(t *testing.T, srv *redistest.Server, cmds ...[]string) {
	t.Helper()
	_, err := srv.DoAll(append(cmds, []string{"CLIENT", "KILL", "TYPE", "normal"})...)
	require.NoError(t, err)
}

// decideAgain checks key (quota 1) until the service answers 200, and returns whether it was
// allowed: the first checks after reconnect meet the closed connections (503, which counts
// nothing). The wait is bounded, for a service that cannot reconnect never answers 200.
func decideAgain(t *testing.T, addr, key string) (allowed bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(checkBody(key, 1)))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var a struct{ Allowed bool }
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&a) != nil {
			return false
		}
		allowed = a.Allowed
		return true
	}, 30*time.Second, 20*time.Millisecond, "the service reconnects to Redis and decides")
	return allowed
}

// A client certificate rotated on disk (a new key pair, from a new client CA that Redis now
// trusts instead of the old one) is used by the next connection: decisions continue without a
// restart.
func TestARotatedClientCertificateIsUsedWithoutARestart(t *testing.T) {
	t.Parallel()
	pki, old, next := redistest.NewPKI(t), redistest.NewPKI(t), redistest.NewPKI(t)
	srv := redistest.StartTLS(t, redistest.TLS{PKI: pki, AuthClients: true})
	// Redis trusts the test's own client CA (for DoAll) and the service's current one.
	_, err := srv.Do("CONFIG", "SET", "tls-ca-cert-file", bundle(t, pki.CA, old.CA))
	require.NoError(t, err)
	files := copyFiles(t, t.TempDir(), old.ClientCert, old.ClientKey)
	addr := startPatient(t, "-redis", srv.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA,
		"-redis-tls-cert", files[0], "-redis-tls-key", files[1])
	assert.True(t, decide(t, addr, "rotated"))

	replaceFile(t, files[0], next.ClientCert)
	replaceFile(t, files[1], next.ClientKey)
	reconnect(t, srv, []string{"CONFIG", "SET", "tls-ca-cert-file", bundle(t, pki.CA, next.CA)})
	assert.False(t, decideAgain(t, addr, "rotated"), "Redis, which no longer trusts the old certificate, decides, and keeps the count")
}

// A CA bundle rotated on disk (Redis now presents a certificate of a new CA) is used by the
// next connection's verification, without a restart.
func TestARotatedCABundleIsUsedWithoutARestart(t *testing.T) {
	t.Parallel()
	pki, next := redistest.NewPKI(t), redistest.NewPKI(t)
	srv := redistest.StartTLS(t, redistest.TLS{PKI: pki})
	ca := copyFiles(t, t.TempDir(), pki.CA)[0]
	addr := startPatient(t, "-redis", srv.Addr(), "-redis-tls", "-redis-tls-ca", ca)
	assert.True(t, decide(t, addr, "ca"))

	replaceFile(t, ca, next.CA)
	reconnect(t, srv, []string{"CONFIG", "SET", "tls-cert-file", next.ServerCert, "tls-key-file", next.ServerKey})
	assert.False(t, decideAgain(t, addr, "ca"), "the server's new certificate verifies against the new CA file")
}

// A rotation caught half-done (a certificate without its key yet) keeps the pair in use:
// decisions continue, and the completed rotation is used by the next connection.
func TestAHalfWrittenRotationKeepsThePairInUse(t *testing.T) {
	t.Parallel()
	pki := redistest.NewPKI(t)
	srv := redistest.StartTLS(t, redistest.TLS{PKI: pki, AuthClients: true})
	files := copyFiles(t, t.TempDir(), pki.ClientCert, pki.ClientKey)
	addr := startPatient(t, "-redis", srv.Addr(), "-redis-tls", "-redis-tls-ca", pki.CA,
		"-redis-tls-cert", files[0], "-redis-tls-key", files[1])
	assert.True(t, decide(t, addr, "half"))

	cert, key := pki.Issue(t, "client2", "meshlimit")
	replaceFile(t, files[0], cert) // its key is not written yet: the pair does not match
	reconnect(t, srv)
	assert.False(t, decideAgain(t, addr, "half"), "the pair in use connects")
	replaceFile(t, files[1], key)
	reconnect(t, srv)
	assert.False(t, decideAgain(t, addr, "half"), "the completed pair connects")
}

package redistest

import (
	"os/exec"
	"testing"
)

// StartValkey starts a valkey-server (Valkey, the Linux Foundation's fork of Redis 7.2, which
// speaks the same protocol and runs the same Lua) as Start starts a redis-server. Valkey is not
// part of the suite's requirements: Debian 12, whose redis-server the suite runs on, has no
// valkey-server package (Debian 13 has). Without valkey-server on the PATH the test is skipped,
// saying so.
func StartValkey(t testing.TB, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("valkey-server"); err != nil {
		t.Skip("valkey-server not found in PATH: Debian 12 has no valkey package; on Debian 13 or later, apt-get install valkey-server to run the Valkey tests")
	}
	r := &Server{t: t, dir: t.TempDir(), extra: extra, bin: "valkey-server"}
	r.startOnFreePort()
	t.Cleanup(r.Stop)
	return r
}

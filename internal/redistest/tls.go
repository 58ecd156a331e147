package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ServerName is the DNS name the server certificate of a PKI holds besides 127.0.0.1 and
// localhost.
const ServerName = "redis.meshlimit.test"

// PKI is a certificate authority made by a test and the certificates it signed, as PEM files in
// a temporary directory of the test.
type PKI struct {
	CA                    string // the CA's certificate
	ServerCert, ServerKey string // for 127.0.0.1, localhost and ServerName; a client certificate too (a replica's, a sentinel's)
	ClientCert, ClientKey string // a client certificate, CN meshlimit

	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewPKI makes a CA and its server and client certificates.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "meshlimit test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	p := &PKI{dir: t.TempDir(), cert: cert, key: key}
	p.CA = p.write(t, "ca.pem", "CERTIFICATE", der)
	p.ServerCert, p.ServerKey = p.Issue(t, "server", "redis", "127.0.0.1", "localhost", ServerName)
	p.ClientCert, p.ClientKey = p.Issue(t, "client", "meshlimit")
	return p
}

// Issue writes a certificate that the CA signs for the common name cn and the subject
// alternative names sans (IP addresses or DNS names; none: the certificate names its subject
// in the common name only), usable by servers and clients, and returns its files.
func (p *PKI) Issue(t testing.TB, file, cn string, sans ...string) (cert, key string) {
	t.Helper()
	return p.IssueValid(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), file, cn, sans...)
}

// IssueValid is Issue for a certificate valid from notBefore to notAfter: one that expired
// an hour ago is refused as expired now, without a wait.
func (p *PKI) IssueValid(t testing.TB, notBefore, notAfter time.Time, file, cn string, sans ...string) (cert, key string) {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &k.PublicKey, p.key)
	require.NoError(t, err)
	pk, err := x509.MarshalPKCS8PrivateKey(k)
	require.NoError(t, err)
	return p.write(t, file+".pem", "CERTIFICATE", der), p.write(t, file+"-key.pem", "PRIVATE KEY", pk)
}

// ClientConfig is the TLS configuration of a client that trusts the CA and presents the
// client certificate.
func (p *PKI) ClientConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(p.cert)
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		panic(err) // written by NewPKI a moment ago
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

func (p *PKI) write(t testing.TB, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

// TLS makes a server's port a TLS port (its plain port is 0).
type TLS struct {
	PKI *PKI
	// AuthClients requires a client certificate that the CA signed (tls-auth-clients yes);
	// otherwise none is asked for.
	AuthClients bool
	// Protocols is tls-protocols, e.g. "TLSv1.2"; empty: Redis's default, TLS 1.2 and 1.3.
	Protocols string
	// Cert and Key replace the PKI's server certificate (one from Issue, say).
	Cert, Key string
}

// args are redis-server's TLS arguments. The server's certificate is its client certificate
// too, for its replication and a sentinel's connections, which use TLS (tls-replication).
func (c *TLS) args() []string {
	cert, key := c.PKI.ServerCert, c.PKI.ServerKey
	if c.Cert != "" {
		cert, key = c.Cert, c.Key
	}
	auth := "no"
	if c.AuthClients {
		auth = "yes"
	}
	args := []string{"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", c.PKI.CA,
		"--tls-auth-clients", auth, "--tls-replication", "yes"}
	if c.Protocols != "" {
		args = append(args, "--tls-protocols", c.Protocols)
	}
	return args
}

// StartTLS starts a redis-server whose port is a TLS port, with extra arguments, and returns
// once it accepts connections. Its Do speaks TLS with the PKI's client certificate.
func StartTLS(t testing.TB, c TLS, extra ...string) *Server {
	t.Helper()
	Require(t)
	r := &Server{t: t, dir: t.TempDir(), extra: extra, tls: &c}
	r.startOnFreePort()
	t.Cleanup(r.Stop)
	return r
}

package redistest

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestATLSServerAnswersOverTLSOnlyWithItsCA(t *testing.T) {
	p := NewPKI(t)
	r := StartTLS(t, TLS{PKI: p})
	out, err := r.Do("PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", out)
	v, err := r.Strings("CONFIG", "GET", "port")
	require.NoError(t, err)
	assert.Equal(t, []string{"port", "0"}, v, "no plain port")

	_, err = Do(r.Addr(), "PING")
	assert.Error(t, err, "a plain client is refused")
	other := NewPKI(t).ClientConfig()
	_, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.Addr(), other)
	assert.ErrorContains(t, err, "certificate signed by unknown authority", "the server certificate is the test CA's")
}

func TestATLSServerThatAuthenticatesClientsWantsACertificateOfItsCA(t *testing.T) {
	p := NewPKI(t)
	r := StartTLS(t, TLS{PKI: p, AuthClients: true})
	out, err := r.Do("PING")
	require.NoError(t, err, "Do presents the PKI's client certificate")
	assert.Equal(t, "PONG", out)

	noCert := p.ClientConfig()
	noCert.Certificates = nil
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.Addr(), noCert)
	if err == nil { // TLS 1.3: the server checks the client after the handshake
		defer c.Close()
		_, err = do(c, "PING")
	}
	assert.Error(t, err)
}

func TestACertificateIssuedWithoutNamesHoldsItsCommonNameOnly(t *testing.T) {
	p := NewPKI(t)
	cert, key := p.Issue(t, "cn-only", "127.0.0.1")
	r := StartTLS(t, TLS{PKI: p, Cert: cert, Key: key})
	_, err := r.Do("PING")
	assert.ErrorContains(t, err, "legacy Common Name field", "Go verifies names in the SANs only")
}

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/meshlimit/meshlimit/service/redisstore"
)

// tlsConfig is the TLS configuration of the connections to Redis, verifying serverName when it
// is set (the sentinels' may differ from the nodes'), and its source: the configuration of a
// new connection, with the CA bundle and client key pair as they are on disk then (tlsfiles.go).
func (o *redisOptions) tlsConfig(serverName string, log *slog.Logger) (*tls.Config, func() *tls.Config, error) {
	files := &tlsFiles{ca: o.tlsCA, cert: o.tlsCert, key: o.tlsKey, log: log}
	if o.tlsCA == "" {
		// Loaded now, not by the first handshake, whose dial timeout it would eat into.
		roots, err := systemRoots()
		if err != nil {
			return nil, nil, fmt.Errorf("-redis-tls-ca: none given, and the system's CAs: %w", err)
		}
		if roots.Equal(x509.NewCertPool()) {
			return nil, nil, errors.New("-redis-tls-ca: none given, and the system has no CA certificates (an image without a base has none): give the CA of the Redis certificates, or SSL_CERT_FILE")
		}
		files.roots = roots
	}
	if err := files.load(); err != nil {
		return nil, nil, err
	}
	if err := files.checkValid(time.Now()); err != nil {
		return nil, nil, err
	}
	build := func(roots *x509.CertPool, pair *tls.Certificate) *tls.Config {
		c := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12, RootCAs: roots}
		if o.tlsMinVersion == "1.3" {
			c.MinVersion = tls.VersionTLS13
		}
		if pair != nil {
			c.Certificates = []tls.Certificate{*pair}
		}
		if o.tlsVerify == "chain" {
			c.InsecureSkipVerify = true // crypto/tls skips the name; VerifyConnection checks the chain
			c.VerifyConnection = verifyChain(roots)
		}
		return c
	}
	return build(files.roots, files.pair), func() *tls.Config { return build(files.current()) }, nil
}

// systemRoots is x509.SystemCertPool; a test replaces it.
var systemRoots = x509.SystemCertPool

// verifyChain verifies that a CA of roots (nil: the system's) signed the server's
// certificate, for server authentication, whatever name it holds.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		return err
	}
}

// The TLS alerts (RFC 8446 §6) that name what Redis refused, as crypto/tls words a remote
// alert (its type is unexported: a *net.OpError of Op "remote error" wraps it).
const (
	alertCertificateRequired = "tls: certificate required"
	alertBadCertificate      = "tls: bad certificate"
	alertUnknownCA           = "tls: unknown certificate authority"
	alertProtocolVersion     = "tls: protocol version not supported"
	alertHandshakeFailure    = "tls: handshake failure"
)

// explain names the flag to fix when err, of connecting to Redis, is a TLS failure (or a plain
// connection to a TLS port), refused credentials or a sentinel given as a Redis, and returns
// nil otherwise.
func (o *redisOptions) explain(err error) error {
	if why := o.explainAuth(err); why != nil {
		return why
	}
	var (
		unknown x509.UnknownAuthorityError
		name    x509.HostnameError
		invalid x509.CertificateInvalidError
		record  tls.RecordHeaderError
	)
	closed := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	// A connection to one of the -redis addresses in Sentinel mode is a sentinel's, which
	// -redis-sentinel-tls may have left plain; so is one the dialer knows for a sentinel's.
	var dial *redisstore.DialError
	sentinel := errors.As(err, &dial) && dial.Sentinel ||
		o.sentinelMaster != "" && slices.Contains(strings.Split(o.addrs, ","), remoteAddr(err))
	tlsFlag, tlsOn, nameFlag, cert := "-redis-tls", o.tls, "-redis-tls-server-name", "the Redis certificate"
	if sentinel {
		tlsFlag, tlsOn, nameFlag, cert = "-redis-sentinel-tls", o.tls && o.sentinelTLS, "-redis-sentinel-tls-server-name", "the sentinel's certificate"
	}
	switch alert := remoteAlert(err); {
	case errors.As(err, &unknown) && o.tlsCA == "":
		return fmt.Errorf("-redis-tls-ca: %s is not signed by a CA the system trusts: give its CA (%w)", cert, err)
	case errors.As(err, &unknown):
		return fmt.Errorf("-redis-tls-ca %s: %s is not signed by a CA in it (%w)", o.tlsCA, cert, err)
	case errors.As(err, &name) && hasNoSANs(name.Certificate):
		return fmt.Errorf("%s: %s is not for %s: give a name it holds, or -redis-tls-verify chain as it names its server in the Common Name only (%w)", nameFlag, cert, name.Host, err)
	case errors.As(err, &name):
		return fmt.Errorf("%s: %s is not for %s: give a name it holds (%w)", nameFlag, cert, name.Host, err)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Errorf("%s has expired or is not valid yet: renew it on the server, or check this host's clock (%w)", cert, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("-redis-tls-ca: %s is not valid (%w)", cert, err)
	case alert == alertProtocolVersion:
		return fmt.Errorf("-redis-tls-min-version %s: Redis offers no TLS version from %s up (%w)", o.tlsMinVersion, o.tlsMinVersion, err)
	case o.tlsCert == "" && (alert == alertCertificateRequired || alert == alertHandshakeFailure || tlsOn && closed):
		// TLS 1.3 ends the handshake before the server checks the client's certificate: a
		// server that requires one closes the connection, and the client's first write or read
		// meets the reset or, if it reads first, the alert.
		return fmt.Errorf("-redis-tls-cert: Redis closed the TLS connection as it does to a client without a certificate, which it requires (tls-auth-clients) (%w)", err)
	case o.tlsCert != "" && (alert == alertBadCertificate || alert == alertUnknownCA || alert == alertHandshakeFailure || tlsOn && closed):
		return fmt.Errorf("-redis-tls-cert %s: Redis closed the TLS connection as it does to a client certificate that no CA it trusts signed (%w)", o.tlsCert, err)
	case errors.As(err, &record):
		return fmt.Errorf("%s: Redis does not speak TLS on this port (%w)", tlsFlag, err)
	case tlsOn && sentinel && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)):
		return fmt.Errorf("-redis-sentinel-tls: no TLS handshake from the sentinel within the dial timeout, as from a plain port: -redis-sentinel-tls=false for plain sentinels (%w)", err)
	case tlsOn && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)):
		return fmt.Errorf("%s: no TLS handshake within the dial timeout: a plain Redis port waits for a command, not a handshake (%w)", tlsFlag, err)
	case !tlsOn && closed:
		return fmt.Errorf("%s: Redis closed the connection, as a TLS port does to a plain client (%w)", tlsFlag, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("no answer within the dial timeout: something accepts connections there but does not answer as Redis does (a stopped Redis, a proxy, another service); check the address (%w)", err)
	}
	return nil
}

// explainAuth names the flags of the credentials Redis or the sentinels refused, and says so
// of a sentinel given without -redis-sentinel-master; nil for any other error.
func (o *redisOptions) explainAuth(err error) error {
	var auth *redisstore.AuthError
	switch {
	case errors.Is(err, redisstore.ErrSentinelNotRedis):
		return fmt.Errorf("-redis-sentinel-master: %s is a Redis Sentinel, not a Redis: give the master set name it monitors (SENTINEL MASTERS lists them) (%w)", o.addrs, err)
	case !errors.As(err, &auth):
		return nil
	case auth.Sentinel && auth.Missing:
		return fmt.Errorf("-redis-sentinel-password-file: the sentinels require a password and none was given (or %s) (%w)", envSentinelPassword, err)
	case auth.Sentinel:
		return fmt.Errorf("-redis-sentinel-password-file and -redis-sentinel-username: the sentinels refused them: a wrong user or password (the file's bytes less one trailing newline are the password) (%w)", err)
	case auth.Missing:
		return fmt.Errorf("-redis-password-file: Redis requires a password and none was given (or %s) (%w)", envRedisPassword, err)
	}
	return fmt.Errorf("-redis-password-file and -redis-username: Redis refused them: a wrong user or password (the file's bytes less one trailing newline are the password) (%w)", err)
}

// hasNoSANs reports whether c names no subject in a subject alternative name (only in its
// Common Name, which Go does not verify), so that -redis-tls-verify chain is what it needs.
func hasNoSANs(c *x509.Certificate) bool {
	return c != nil && len(c.DNSNames) == 0 && len(c.IPAddresses) == 0 && len(c.URIs) == 0 && len(c.EmailAddresses) == 0
}

// remoteAddr is the address of the connection err happened on, or "".
func remoteAddr(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Addr != nil {
		return op.Addr.String()
	}
	return ""
}

// remoteAlert is the TLS alert the server sent, as crypto/tls words it, or "".
func remoteAlert(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" && op.Err != nil {
		return op.Err.Error()
	}
	return ""
}

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
// connection to a TLS port), and returns nil otherwise.
func (o *redisOptions) explain(err error) error {
	var (
		unknown x509.UnknownAuthorityError
		name    x509.HostnameError
		invalid x509.CertificateInvalidError
		record  tls.RecordHeaderError
	)
	closed := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	// A connection to one of the -redis addresses in Sentinel mode is a sentinel's, which
	// -redis-sentinel-tls may have left plain.
	tlsFlag, tlsOn := "-redis-tls", o.tls
	if o.sentinelMaster != "" && slices.Contains(strings.Split(o.addrs, ","), remoteAddr(err)) {
		tlsFlag, tlsOn = "-redis-sentinel-tls", o.tls && o.sentinelTLS
	}
	switch alert := remoteAlert(err); {
	case errors.As(err, &unknown) && o.tlsCA == "":
		return fmt.Errorf("-redis-tls-ca: the Redis certificate is not signed by a CA the system trusts: give its CA (%w)", err)
	case errors.As(err, &unknown):
		return fmt.Errorf("-redis-tls-ca %s: the Redis certificate is not signed by a CA in it (%w)", o.tlsCA, err)
	case errors.As(err, &name):
		return fmt.Errorf("-redis-tls-server-name: the Redis certificate is not for %s: give a name it holds, or -redis-tls-verify chain if it names its server in the Common Name only (%w)", name.Host, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("-redis-tls-ca: the Redis certificate is not valid (%w)", err)
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
	case tlsOn && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)):
		return fmt.Errorf("%s: no TLS handshake within the dial timeout: a plain Redis port waits for a command, not a handshake (%w)", tlsFlag, err)
	case !tlsOn && closed:
		return fmt.Errorf("%s: Redis closed the connection, as a TLS port does to a plain client (%w)", tlsFlag, err)
	}
	return nil
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

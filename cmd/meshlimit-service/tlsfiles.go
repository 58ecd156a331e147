package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// tlsFiles are the TLS material of the Redis flags: the CA bundle (-redis-tls-ca) and the
// client key pair (-redis-tls-cert, -redis-tls-key). They are read at start, and again for
// every new connection to Redis (or to a sentinel): what changed on disk (cert-manager, Vault
// or the kubelet rotating a Secret) is parsed and used from that connection on, without a
// restart. A change that does not parse (a pair caught half-written, a CA file without a PEM
// certificate) is logged once and the material in use is kept, so a bad rotation cannot
// break the connections a good one would have made.
type tlsFiles struct {
	ca, cert, key string
	log           *slog.Logger

	mu                     sync.Mutex
	caPEM, certPEM, keyPEM []byte // as last read
	roots                  *x509.CertPool
	pair                   *tls.Certificate
}

// current re-reads the files and returns the CA pool and the key pair (nil: none) in use.
func (f *tlsFiles) current() (*x509.CertPool, *tls.Certificate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(); err != nil {
		f.log.Warn("redis TLS files changed but were not loaded; the previous ones stay in use", "err", err)
	}
	return f.roots, f.pair
}

// load reads the files and parses those whose bytes changed since the last read. It returns
// an error naming the flag of a file that cannot be read or parsed, keeping the previous
// material; f.mu is held (or f not yet shared).
func (f *tlsFiles) load() error {
	if f.ca != "" {
		b, err := os.ReadFile(f.ca)
		if err != nil {
			return fmt.Errorf("-redis-tls-ca: %w", err)
		}
		if !bytes.Equal(b, f.caPEM) {
			f.caPEM = b
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(b) {
				return fmt.Errorf("-redis-tls-ca %s: no PEM certificate in it", f.ca)
			}
			f.roots = pool
		}
	}
	if f.cert == "" {
		return nil
	}
	cert, err := os.ReadFile(f.cert)
	if err != nil {
		return fmt.Errorf("-redis-tls-cert and -redis-tls-key: %w", err)
	}
	key, err := os.ReadFile(f.key)
	if err != nil {
		return fmt.Errorf("-redis-tls-cert and -redis-tls-key: %w", err)
	}
	if bytes.Equal(cert, f.certPEM) && bytes.Equal(key, f.keyPEM) {
		return nil
	}
	f.certPEM, f.keyPEM = cert, key
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return fmt.Errorf("-redis-tls-cert and -redis-tls-key: %w", err)
	}
	f.pair = &pair
	return nil
}

// checkValid refuses a client certificate that is not valid at now (expired, or not yet
// valid), which Redis would refuse with an alert that does not say why.
func (f *tlsFiles) checkValid(now time.Time) error {
	if f.pair == nil || f.pair.Leaf == nil {
		return nil
	}
	switch leaf := f.pair.Leaf; {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("-redis-tls-cert %s: the client certificate expired at %s (now %s): renew it", f.cert,
			leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("-redis-tls-cert %s: the client certificate is not valid before %s (now %s): check the clock", f.cert,
			leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

package redisstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
)

// DialError is a failure to connect (TCP, then the TLS handshake) to a node or a sentinel:
// which one it was tells the caller which settings to fix.
type DialError struct {
	Addr string
	// Sentinel is set for a connection to a sentinel (one of Config.Addrs in Sentinel mode,
	// or one they named). It is known when the sentinels' TLS differs from the nodes' (TLS to
	// the sentinels, or plain sentinels in front of TLS nodes) and Config.TLS and Sentinel.TLS
	// are distinct values; otherwise false.
	Sentinel bool
	Err      error
}

func (e *DialError) Error() string {
	if e.Sentinel {
		return fmt.Sprintf("sentinel %s: %v", e.Addr, e.Err)
	}
	return e.Err.Error()
}

func (e *DialError) Unwrap() error { return e.Err }

// dialer is the client's dial function: it connects as rueidis would, taking each new TLS
// connection's configuration from Config.TLSSource (or Sentinel.TLSSource) when one is set,
// and returns its failures as a *DialError. rueidis passes the configuration of the kind of
// server it dials (Config.TLS for a node, Sentinel.TLS for a sentinel): which one it is tells
// the source to use.
func dialer(cfg Config) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	sentinelMode := cfg.Sentinel.MasterSet != ""
	return func(ctx context.Context, dst string, d *net.Dialer, c *tls.Config) (net.Conn, error) {
		sentinel := sentinelMode && c == cfg.Sentinel.TLS && (c != nil || cfg.TLS != nil)
		var conn net.Conn
		var err error
		if c == nil {
			conn, err = d.DialContext(ctx, "tcp", dst)
		} else {
			switch {
			case sentinel && cfg.Sentinel.TLSSource != nil:
				c = cfg.Sentinel.TLSSource()
			case !sentinel && c == cfg.TLS && cfg.TLSSource != nil:
				c = cfg.TLSSource()
			}
			td := tls.Dialer{NetDialer: d, Config: c}
			conn, err = td.DialContext(ctx, "tcp", dst)
		}
		if err != nil {
			return nil, &DialError{Addr: dst, Sentinel: sentinel, Err: err}
		}
		return conn, nil
	}
}

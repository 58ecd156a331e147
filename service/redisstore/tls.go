package redisstore

import (
	"context"
	"crypto/tls"
	"net"
)

// dialer is the client's dial function: it connects as rueidis would, taking each new TLS
// connection's configuration from Config.TLSSource (or Sentinel.TLSSource) when one is set.
// rueidis passes the configuration of the kind of server it dials (Config.TLS for a node,
// Sentinel.TLS for a sentinel): which one it is tells the source to use.
func dialer(cfg Config) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, d *net.Dialer, c *tls.Config) (net.Conn, error) {
		switch {
		case c == nil:
			return d.DialContext(ctx, "tcp", dst)
		case c == cfg.TLS && cfg.TLSSource != nil:
			c = cfg.TLSSource()
		case c == cfg.Sentinel.TLS && cfg.Sentinel.TLSSource != nil:
			c = cfg.Sentinel.TLSSource()
		}
		td := tls.Dialer{NetDialer: d, Config: c}
		return td.DialContext(ctx, "tcp", dst)
	}
}

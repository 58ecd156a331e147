package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Sentinel configures a Redis reached through Redis Sentinel. Config.Addrs are then sentinels
// (one that answers is enough: the client learns the others from it); they name the current
// master of MasterSet, and the store sends everything to that master. When the sentinels fail
// the master over, they publish +switch-master, and the client (subscribed to one sentinel)
// connects to the new master and sends the next commands there, without a restart.
//
// While the master is gone and no +switch-master has come, decisions fail with the store's
// errors (the service answers 503 within its deadline): that lasts the sentinels'
// down-after-milliseconds plus the election and the promotion when the master dies, and from
// the demotion to the announcement in a SENTINEL FAILOVER. Counts are what Redis replication
// keeps: what the replica had received when it was promoted; writes the old master took after
// that are lost when it rejoins as a replica (docs/deploy.md, "Redis: managed services, TLS,
// Sentinel", has the measured figures).
type Sentinel struct {
	// MasterSet is the name the sentinels monitor the master by (sentinel monitor <name> ...).
	MasterSet string
	// Username and Password authenticate to the sentinels (their requirepass, or an ACL user)
	// when set; the master's are Config.Username and Config.Password.
	Username, Password string
	// TLS is the TLS configuration of the connections to the sentinels; nil: plain TCP.
	TLS *tls.Config
	// TLSSource, when not nil (with TLS), gives the TLS configuration of each new connection to
	// a sentinel, as Config.TLSSource does for the nodes.
	TLSSource func() *tls.Config
}

// connect returns the client of cfg (defaults applied): a Sentinel client when
// cfg.Sentinel.MasterSet is set, otherwise a Cluster client, or a standalone one when the one
// address is not a Cluster node. It fails when no address answers.
func connect(cfg Config) (rueidis.Client, error) {
	opt := rueidis.ClientOption{
		InitAddress:   cfg.Addrs,
		Username:      cfg.Username,
		Password:      cfg.Password,
		TLSConfig:     cfg.TLS,
		DisableCache:  true, // no client-side caching: every decision must reach Redis
		Dialer:        net.Dialer{Timeout: cfg.DialTimeout},
		MaxFlushDelay: cfg.FlushDelay,
		DialCtxFn:     dialer(cfg),
	}
	if cfg.Sentinel.MasterSet == "" {
		c, err := rueidis.NewClient(opt)
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", authError(err, false))
		}
		if err := refuseSentinel(c, cfg.DialTimeout); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	opt.Sentinel = rueidis.SentinelOption{
		MasterSet: cfg.Sentinel.MasterSet,
		Username:  cfg.Sentinel.Username,
		Password:  cfg.Sentinel.Password,
		TLSConfig: cfg.Sentinel.TLS,
		// rueidis gives the sentinels' dialer no defaults: without these, connecting to a
		// sentinel that does not answer would wait for the kernel's timeout.
		Dialer: net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: rueidis.DefaultTCPKeepAlive},
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		if isAuthFailure(err) {
			err = authError(err, sentinelAuthFails(cfg))
		}
		return nil, fmt.Errorf("redisstore: sentinel master set %q: %w", cfg.Sentinel.MasterSet, err)
	}
	return c, nil
}

// AuthError is a connection Redis (or a sentinel) refused for its credentials: NOAUTH (none
// given where some are required) or WRONGPASS (a wrong user or password).
type AuthError struct {
	// Sentinel is set when the sentinels refused theirs (Sentinel.Username, Sentinel.Password),
	// not the master its own (Config.Username, Config.Password).
	Sentinel bool
	// Missing is set for NOAUTH: no password was given.
	Missing bool
	Err     error
}

func (e *AuthError) Error() string { return e.Err.Error() }

func (e *AuthError) Unwrap() error { return e.Err }

// isAuthFailure reports whether err is Redis refusing the credentials.
func isAuthFailure(err error) bool {
	s := err.Error()
	return strings.Contains(s, "WRONGPASS") || strings.Contains(s, "NOAUTH")
}

// authError is err as an *AuthError when it is an authentication failure, err otherwise.
func authError(err error, sentinel bool) error {
	if !isAuthFailure(err) {
		return err
	}
	return &AuthError{Sentinel: sentinel, Missing: strings.Contains(err.Error(), "NOAUTH"), Err: err}
}

// sentinelAuthFails reports whether a sentinel of cfg.Addrs refuses the sentinels'
// credentials: a plain connection to it, which tells a sentinel's refusal from the master's.
func sentinelAuthFails(cfg Config) bool {
	for _, addr := range cfg.Addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{addr}, Username: cfg.Sentinel.Username, Password: cfg.Sentinel.Password,
			TLSConfig: cfg.Sentinel.TLS, ForceSingleClient: true, DisableCache: true,
			Dialer: net.Dialer{Timeout: cfg.DialTimeout},
		})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*cfg.DialTimeout)
			err = c.Do(ctx, c.B().Ping().Build()).Error()
			cancel()
			c.Close()
		}
		if err != nil && isAuthFailure(err) {
			return true
		}
		if err == nil {
			return false
		}
	}
	return false
}

// ErrSentinelNotRedis is New's error when Config.Addrs are sentinels but Sentinel.MasterSet is
// empty: a sentinel answers no script, so every decision would fail.
var ErrSentinelNotRedis = errors.New("redisstore: the address is a Redis Sentinel, not a Redis: give the master set it monitors (Sentinel.MasterSet)")

// refuseSentinel returns ErrSentinelNotRedis when c's server says (ROLE) that it is a
// sentinel. A server that refuses ROLE (a managed service's ACL) is taken for a Redis.
func refuseSentinel(c rueidis.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	role, err := c.Do(ctx, c.B().Role().Build()).ToArray()
	if err != nil || len(role) == 0 {
		return nil
	}
	if kind, _ := role[0].ToString(); kind == "sentinel" {
		return ErrSentinelNotRedis
	}
	return nil
}

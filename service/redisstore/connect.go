package redisstore

import (
	"crypto/tls"
	"fmt"
	"net"

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
			return nil, fmt.Errorf("redisstore: %w", err)
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
		return nil, fmt.Errorf("redisstore: sentinel master set %q: %w", cfg.Sentinel.MasterSet, err)
	}
	return c, nil
}

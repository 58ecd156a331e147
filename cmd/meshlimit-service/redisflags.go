package main

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/service"
	"github.com/meshlimit/meshlimit/service/redisstore"
)

// redisOptions are the flags of the Redis store, all named -redis...: where Redis is
// (standalone, Cluster or Sentinel), how to authenticate, and TLS. Secrets come from files
// (mounted, not in the process list) or from the environment, never from the command line.
type redisOptions struct {
	addrs                      string
	username, passwordFile     string
	password                   string // MESHLIMIT_REDIS_PASSWORD
	flushDelay                 time.Duration
	tls                        bool
	tlsCA, tlsCert, tlsKey     string
	tlsServerName              string
	tlsMinVersion, tlsVerify   string
	sentinelMaster             string
	sentinelUser, sentinelFile string
	sentinelPassword           string // MESHLIMIT_REDIS_SENTINEL_PASSWORD
	sentinelTLS                bool
	sentinelServerName         string
	tagKeyFile                 string
	tagKey                     string // MESHLIMIT_REDIS_TAG_KEY
}

// The environment variables of the passwords (a flag names a file instead).
const (
	envRedisPassword    = "MESHLIMIT_REDIS_PASSWORD"
	envSentinelPassword = "MESHLIMIT_REDIS_SENTINEL_PASSWORD"
	envTagKey           = "MESHLIMIT_REDIS_TAG_KEY"
)

// add adds the flags to f.
func (o *redisOptions) add(f *envFlags) {
	f.string(&o.addrs, "redis", "", "comma-separated `addresses`: one standalone Redis, seeds of a Redis Cluster, or with -redis-sentinel-master the sentinels (empty: in-memory store)")
	f.string(&o.username, "redis-username", "", "Redis ACL `user` (empty: the default user)")
	f.string(&o.passwordFile, "redis-password-file", "", "`file` holding the Redis password (or "+envRedisPassword+"); one trailing newline is ignored")
	f.duration(&o.flushDelay, "redis-flush-delay", redisstore.DefaultFlushDelay, 0, time.Second, "how long the Redis client may wait to batch concurrent scripts into one write, a `duration` of at most 1s")
	f.bool(&o.tls, "redis-tls", false, "connect to Redis over TLS, verifying its certificate against the system's CAs or -redis-tls-ca")
	f.string(&o.tlsCA, "redis-tls-ca", "", "PEM `file` of the CAs that sign the Redis server certificates (empty: the system's)")
	f.string(&o.tlsCert, "redis-tls-cert", "", "PEM `file` of a client certificate, for a Redis that asks for one (tls-auth-clients); with -redis-tls-key")
	f.string(&o.tlsKey, "redis-tls-key", "", "PEM `file` of the client certificate's private key")
	f.string(&o.tlsServerName, "redis-tls-server-name", "", "`name` the Redis certificates must hold, also sent as SNI (empty: the host of each address)")
	f.choice(&o.tlsMinVersion, "redis-tls-min-version", "1.2", []string{"1.2", "1.3"}, "lowest TLS `version` accepted: 1.2 or 1.3")
	f.choice(&o.tlsVerify, "redis-tls-verify", "full", []string{"full", "chain"}, "`mode` of verifying a Redis certificate: full (a CA signed it for the server's name) or chain (a CA signed it, whatever name it holds: for a certificate that names its server in the Common Name only)")
	f.string(&o.sentinelMaster, "redis-sentinel-master", "", "master set `name` the sentinels at -redis monitor: the store follows its failovers")
	f.string(&o.sentinelUser, "redis-sentinel-username", "", "ACL `user` of the sentinels")
	f.string(&o.sentinelFile, "redis-sentinel-password-file", "", "`file` holding the sentinels' password (or "+envSentinelPassword+")")
	f.bool(&o.sentinelTLS, "redis-sentinel-tls", true, "with -redis-tls, reach the sentinels over TLS too; false: plain TCP to the sentinels")
	f.string(&o.tagKeyFile, "redis-tag-key-file", "", "`file` holding the secret that keys the Redis hash tag (or "+envTagKey+"), the same for every replica: without it, keys sharing a Cluster slot can be searched for offline; setting it renames every key once")
	f.string(&o.sentinelServerName, "redis-sentinel-tls-server-name", "", "`name` the sentinels' certificates must hold (empty: -redis-tls-server-name's)")
}

// readEnv reads the passwords given in the environment.
func (o *redisOptions) readEnv(getenv func(string) string) {
	o.password, o.sentinelPassword = getenv(envRedisPassword), getenv(envSentinelPassword)
	o.tagKey = getenv(envTagKey)
}

// check refuses a flag (or password variable) that does nothing without another, naming both,
// and secrets given twice.
func (o *redisOptions) check() error {
	redis, tls, sentinel := o.addrs != "", o.tls, o.sentinelMaster != ""
	for _, n := range []struct {
		flag       string
		set        bool
		needs      string
		needsIsSet bool
	}{
		{"-redis-username", o.username != "", "-redis", redis},
		{"-redis-password-file", o.passwordFile != "", "-redis", redis},
		{envRedisPassword, o.password != "", "-redis", redis},
		{"-redis-tag-key-file", o.tagKeyFile != "", "-redis", redis},
		{envTagKey, o.tagKey != "", "-redis", redis},
		{"-redis-tls", o.tls, "-redis", redis},
		{"-redis-sentinel-master", sentinel, "-redis", redis},
		{"-redis-tls-ca", o.tlsCA != "", "-redis-tls", tls},
		{"-redis-tls-cert", o.tlsCert != "", "-redis-tls", tls},
		{"-redis-tls-key", o.tlsKey != "", "-redis-tls", tls},
		{"-redis-tls-server-name", o.tlsServerName != "", "-redis-tls", tls},
		{"-redis-tls-min-version", o.tlsMinVersion != "1.2", "-redis-tls", tls},
		{"-redis-tls-verify", o.tlsVerify != "full", "-redis-tls", tls},
		{"-redis-sentinel-username", o.sentinelUser != "", "-redis-sentinel-master", sentinel},
		{"-redis-sentinel-password-file", o.sentinelFile != "", "-redis-sentinel-master", sentinel},
		{envSentinelPassword, o.sentinelPassword != "", "-redis-sentinel-master", sentinel},
		{"-redis-sentinel-tls-server-name", o.sentinelServerName != "", "-redis-sentinel-master", sentinel},
		{"-redis-sentinel-tls-server-name", o.sentinelServerName != "", "-redis-tls", tls},
	} {
		if n.set && !n.needsIsSet {
			return fmt.Errorf("%s: needs %s", n.flag, n.needs)
		}
	}
	if err := checkAddrs(o.addrs); err != nil {
		return err
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("-redis-tls-cert and -redis-tls-key: give both or neither")
	}
	if o.password != "" && o.passwordFile != "" {
		return fmt.Errorf("%s and -redis-password-file: give one", envRedisPassword)
	}
	if o.tagKey != "" && o.tagKeyFile != "" {
		return fmt.Errorf("%s and -redis-tag-key-file: give one", envTagKey)
	}
	if o.sentinelPassword != "" && o.sentinelFile != "" {
		return fmt.Errorf("%s and -redis-sentinel-password-file: give one", envSentinelPassword)
	}
	return nil
}

// checkAddrs refuses a -redis list (when given) with an empty entry (a trailing or doubled
// comma), an address twice, a URL, or an entry that is not host:port.
func checkAddrs(addrs string) error {
	if addrs == "" {
		return nil
	}
	seen := map[string]bool{}
	for _, a := range strings.Split(addrs, ",") {
		switch _, _, err := net.SplitHostPort(a); {
		case a == "":
			return fmt.Errorf("-redis %s: an empty address (a trailing or doubled comma)", addrs)
		case strings.Contains(a, "://"):
			return fmt.Errorf("-redis %s: give host:port, not a URL: TLS (rediss://) is -redis-tls, a password -redis-password-file, a user -redis-username", a)
		case err != nil:
			return fmt.Errorf("-redis %s: want host:port (%w)", a, err)
		case seen[a]:
			return fmt.Errorf("-redis %s: given twice", a)
		}
		seen[a] = true
	}
	return nil
}

// config is the store's configuration: the files read, the TLS configurations built.
func (o *redisOptions) config(log *slog.Logger) (redisstore.Config, error) {
	cfg := redisstore.Config{Addrs: strings.Split(o.addrs, ","), Username: o.username, Password: o.password, FlushDelay: o.flushDelay, TagKey: o.tagKey}
	var err error
	if o.tagKeyFile != "" {
		if cfg.TagKey, err = readSecret("-redis-tag-key-file", o.tagKeyFile); err != nil {
			return cfg, err
		}
	}
	if o.passwordFile != "" {
		if cfg.Password, err = readSecret("-redis-password-file", o.passwordFile); err != nil {
			return cfg, err
		}
	}
	if o.tls {
		if cfg.TLS, cfg.TLSSource, err = o.tlsConfig(o.tlsServerName, log); err != nil {
			return cfg, err
		}
	}
	if o.sentinelMaster == "" {
		return cfg, nil
	}
	s := redisstore.Sentinel{MasterSet: o.sentinelMaster, Username: o.sentinelUser, Password: o.sentinelPassword}
	if o.sentinelFile != "" {
		if s.Password, err = readSecret("-redis-sentinel-password-file", o.sentinelFile); err != nil {
			return cfg, err
		}
	}
	if o.tls && o.sentinelTLS {
		if s.TLS, s.TLSSource, err = o.tlsConfig(cmp.Or(o.sentinelServerName, o.tlsServerName), log); err != nil {
			return cfg, err
		}
	}
	cfg.Sentinel = s
	return cfg, nil
}

// readSecret reads the secret in file, less one trailing newline (as `echo` and most editors
// leave one, and Kubernetes mounts a Secret's bytes as they are).
func readSecret(flag, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s %s: empty", flag, file)
	}
	return s, nil
}

// open connects to Redis. A TLS failure names the flag to fix.
func (o *redisOptions) open(log *slog.Logger) (service.Store, error) {
	cfg, err := o.config(log)
	if err != nil {
		return nil, usageError{err}
	}
	store, err := redisstore.New(cfg)
	if err != nil {
		if why := o.explain(err); why != nil {
			return nil, fmt.Errorf("-redis %s: %w", o.addrs, why)
		}
		return nil, fmt.Errorf("-redis %s: %w", o.addrs, err)
	}
	log.Info("store", "kind", "redis", "addrs", cfg.Addrs, "sentinel_master", o.sentinelMaster,
		"tls", o.tls, "flush_delay", o.flushDelay)
	return store, nil
}

// choice adds a string flag that accepts one of choices.
func (f *envFlags) choice(p *string, name, def string, choices []string, usage string) {
	*p = def
	f.fs.Var(&choiceValue{f: f, name: name, p: p, choices: choices}, name, usage)
}

// choiceValue is a string flag that accepts one of its choices.
type choiceValue struct {
	f       *envFlags
	name    string
	p       *string
	choices []string
}

func (v *choiceValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v *choiceValue) Set(s string) error {
	if !slices.Contains(v.choices, s) {
		return v.f.refuse(v.name, v, s)
	}
	*v.p = s
	return nil
}

func (v *choiceValue) want() string {
	return strings.Join(v.choices[:len(v.choices)-1], ", ") + " or " + v.choices[len(v.choices)-1]
}

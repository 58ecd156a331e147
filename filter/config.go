package filter

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// Defaults and bounds of the configuration. docs/configuration.md is the user-facing
// reference; it must agree with these.
const (
	// DefaultMaxKeys is the number of distinct key values a rule keeps state for when
	// neither the rule nor the top level sets max_keys.
	DefaultMaxKeys = 10000
	// MaxMaxKeys is the largest max_keys accepted (2^20).
	MaxMaxKeys = 1 << 20
	// DefaultStatus is the status of a denied request.
	DefaultStatus = 429
	// DefaultBody is the text body of a denied request when none is configured.
	DefaultBody = "rate limit exceeded\n"
	// DefaultGlobalTimeout bounds a call to the global service (as Envoy's ratelimit filter).
	DefaultGlobalTimeout = 20 * time.Millisecond
	// DefaultGlobalPath is the path of the global service's decision endpoint.
	DefaultGlobalPath = "/v1/check"
	// DefaultBreakerFailures is how many consecutive failed calls open the circuit breaker.
	DefaultBreakerFailures = 5
	// DefaultBreakerCooldown is how long an open breaker stops calling before it probes.
	DefaultBreakerCooldown = 5 * time.Second
	// DefaultMaxCost caps a cost read from a header when the rule sets no max.
	DefaultMaxCost = 1_000_000

	maxRules        = 256
	maxLimits       = 8
	maxKeyParts     = 8
	maxOverrides    = 100_000
	maxListItems    = 256 // route_names, hosts, methods, headers of one match
	maxRegexLen     = 1024
	maxNameLen      = 64
	maxBodyLen      = 16 << 10
	maxExtraHeaders = 32
	maxHeaderValue  = 8 << 10
	maxTrustedHops  = 64
	maxCostValue    = 1_000_000_000
	maxJitter       = time.Hour
	maxGlobalTime   = time.Minute
	maxErrors       = 32
)

// configJSON is the document: the pluginConfig of the WasmPlugin, as JSON.
type configJSON struct {
	// Rules are evaluated in order for every request; each one that matches applies.
	// At least one is required.
	Rules []ruleJSON `json:"rules"`
	// Enforce is the global switch: false makes every rule behave as a shadow rule.
	// Default true.
	Enforce *bool `json:"enforce"`
	// Response shapes denied responses and the quota headers.
	Response responseJSON `json:"response"`
	// MaxKeys is the default of rules[].max_keys. Default DefaultMaxKeys.
	MaxKeys optInt `json:"max_keys"`
	// LogLevel is the least severe level the plugin logs: "trace", "debug", "info",
	// "warn", "error" or "critical". Default "info".
	LogLevel string `json:"log_level"`
	// Global configures the global limit service, required by rules whose scope is
	// "global" or "both".
	Global *globalJSON `json:"global"`
}

// ruleJSON is one element of rules[].
type ruleJSON struct {
	// Name identifies the rule in metrics, logs and the shadow header: 1 to 64 of
	// [a-z0-9_-], starting with a letter or digit, unique. Required.
	Name string `json:"name"`
	// Match selects the requests the rule applies to. Default: all requests.
	Match matchJSON `json:"match"`
	// Key lists the parts whose values, joined, select the bucket. Default: none, so
	// every matching request shares one bucket.
	Key []keyPartJSON `json:"key"`
	// MissingKey is what happens when a request lacks a key part: "skip" (the rule does
	// not apply) or "default" (one shared bucket). Default "skip".
	MissingKey string `json:"missing_key"`
	// Limits are enforced together; a request must pass all of them. 1 to 8 required.
	Limits []limitJSON `json:"limits"`
	// Cost is the number of quota units a request consumes. Default 1.
	Cost *costJSON `json:"cost"`
	// Overrides replace the limits for specific key values.
	Overrides []overrideJSON `json:"overrides"`
	// Shadow makes the rule decide and count but never deny. Default false.
	Shadow bool `json:"shadow"`
	// ShadowHeader, when set, is added to the upstream request with the rule's name as its
	// value whenever the rule would have denied a request it did not deny.
	ShadowHeader string `json:"shadow_header"`
	// MaxKeys is the number of distinct key values the rule keeps state for, 1 to 2^20.
	// Default: the top-level max_keys.
	MaxKeys optInt `json:"max_keys"`
	// FailureMode decides a request when the shared state cannot be updated: "allow" or
	// "deny". Default "allow".
	FailureMode string `json:"failure_mode"`
	// Fallback are limits enforced in this proxy's shared data, instead of the global ones,
	// while the global service cannot answer (a failed call, an open breaker). Only for
	// scope global or both. Default: none, and failure_mode decides.
	Fallback []limitJSON `json:"fallback"`
	// Lease makes a global rule lease quota from the service in batches instead of asking
	// once per request (scope global only).
	Lease *leaseJSON `json:"lease"`
	// Scope is where the rule counts: "local" (this proxy), "global" (the global service)
	// or "both". Default "local".
	Scope string `json:"scope"`
}

// matchJSON is rules[].match. Every condition that is present must hold.
type matchJSON struct {
	// RouteNames matches the Envoy route name (xds.route_name) exactly.
	RouteNames []string `json:"route_names"`
	// Hosts matches :authority, case-insensitively, with or without its port: exact names,
	// "*.suffix" or "*".
	Hosts []string `json:"hosts"`
	// Path matches the path without the query string.
	Path *pathMatchJSON `json:"path"`
	// Methods matches :method, case-insensitively.
	Methods []string `json:"methods"`
	// Headers must all hold.
	Headers []headerMatchJSON `json:"headers"`
}

// pathMatchJSON sets exactly one of its fields.
type pathMatchJSON struct {
	Exact  *string `json:"exact"`  // the whole path; starts with "/"
	Prefix *string `json:"prefix"` // a prefix of the path; starts with "/"
	Regex  *string `json:"regex"`  // RE2 syntax, must match the whole path
}

// headerMatchJSON is one header condition; it sets exactly one of present, exact, prefix
// and regex.
type headerMatchJSON struct {
	Name    string  `json:"name"`    // required, case-insensitive
	Present *bool   `json:"present"` // true: the header is present; false: it is absent
	Exact   *string `json:"exact"`
	Prefix  *string `json:"prefix"`
	Regex   *string `json:"regex"` // RE2 syntax, must match the whole value
	Invert  bool    `json:"invert"`
}

// keyPartJSON is one element of rules[].key: either a string naming a part without
// options ("client_ip", "path", "method", "host", "route_name") or an object with exactly
// one field.
type keyPartJSON struct {
	ClientIP  *clientIPJSON `json:"client_ip"`
	Header    *string       `json:"header"`     // header name
	Path      *bool         `json:"path"`       // must be true
	Method    *bool         `json:"method"`     // must be true
	Host      *bool         `json:"host"`       // must be true
	RouteName *bool         `json:"route_name"` // must be true
	Query     *string       `json:"query"`      // query parameter name
	Constant  *string       `json:"constant"`   // non-empty literal
	Property  *propertyJSON `json:"property"`   // "a.b.c" or ["a", "b.c"]
}

// clientIPJSON is the client_ip key part.
type clientIPJSON struct {
	// TrustedHops is 0 to take the address from source.address, or N (1 to 64) to take the
	// N-th x-forwarded-for entry counted from the right. Default 0.
	TrustedHops optInt `json:"trusted_hops"`
	// IPv4Mask is the prefix length IPv4 addresses are masked to, 0 to 32; 0 or 32 keep the
	// whole address. Default 0.
	IPv4Mask optInt `json:"ipv4_mask"`
	// IPv6Mask is the prefix length IPv6 addresses are masked to, 0 to 128; 0 or 128 keep
	// the whole address. Default 0.
	IPv6Mask optInt `json:"ipv6_mask"`
}

// propertyJSON is an Envoy attribute path: a dotted string, or an array of segments for
// segments that contain dots.
type propertyJSON struct{ segments []string }

// limitJSON is one element of rules[].limits or overrides[].limits.
type limitJSON struct {
	// Name is the policy name in the RateLimit headers: 1 to 64 of [A-Za-z0-9_.-].
	// Default: the rule's name when the list has one limit, else "<rule>-<index>".
	Name string `json:"name"`
	// Rate is "<quota>/<window>", e.g. "100/s", "1000/h", "5/30s". Required.
	Rate string `json:"rate"`
	// Algorithm is "token_bucket", "leaky_bucket", "fixed_window", "sliding_log" or
	// "sliding_window". Default "token_bucket".
	Algorithm string `json:"algorithm"`
	// Burst is the bucket capacity of the bucket algorithms. Default: the quota.
	Burst optInt `json:"burst"`
}

// costJSON is rules[].cost: an integer constant, or an object reading it from a header.
type costJSON struct {
	constant optInt
	object   *costObjectJSON
}

// costObjectJSON is the header form of rules[].cost.
type costObjectJSON struct {
	Header  string `json:"header"`  // required
	Default optInt `json:"default"` // cost when the header is missing or invalid; default 1
	Max     optInt `json:"max"`     // larger values are charged max; default DefaultMaxCost
}

// overrideJSON is one element of rules[].overrides; it sets limits or unlimited.
type overrideJSON struct {
	// Value is the key value it applies to, in the key's human form (see key.go). "" is the
	// shared bucket of missing_key "default". Required.
	Value     *string     `json:"value"`
	Limits    []limitJSON `json:"limits"`
	Unlimited bool        `json:"unlimited"`
}

// responseJSON is the top-level response object.
type responseJSON struct {
	// Status of a denied request, 400 to 599. Default 429.
	Status optInt `json:"status"`
	// Body of a denied request: the text body, or the problem's "detail" member.
	// Default DefaultBody for "text", no detail for "problem_json".
	Body *string `json:"body"`
	// BodyFormat is "text" (text/plain) or "problem_json" (RFC 9457
	// application/problem+json, type quota-exceeded). Default "text".
	BodyFormat string `json:"body_format"`
	// Headers are added to every denied response.
	Headers map[string]string `json:"headers"`
	// RateLimitHeaders lists the quota header sets to send: "ietf" (RateLimit-Policy and
	// RateLimit), "draft03" (X-RateLimit-Limit, -Remaining, -Reset), or "none" alone.
	// Default ["ietf"].
	RateLimitHeaders []string `json:"rate_limit_headers"`
	// QuotaHeadersOnAllowed adds the quota headers to the upstream's response when a
	// request is allowed. Default true.
	QuotaHeadersOnAllowed *bool `json:"quota_headers_on_allowed"`
	// RetryAfterJitter is the most Retry-After is randomly lengthened by. Default 0.
	RetryAfterJitter string `json:"retry_after_jitter"`
}

// globalJSON is the top-level global object. The global path is not implemented yet; the
// object is validated so that configurations written now keep working.
type globalJSON struct {
	// Cluster is the Envoy cluster of the service, e.g.
	// "outbound|8081||ratelimit.ratelimit.svc.cluster.local". Required.
	Cluster string `json:"cluster"`
	// Authority is the :authority of calls. Default: the host of an Istio cluster name.
	Authority string `json:"authority"`
	// Path of the decision endpoint. Default "/v1/check".
	Path string `json:"path"`
	// Timeout of one call, 1ms to 1m. Default "20ms".
	Timeout string `json:"timeout"`
	// Secret is sent in the x-meshlimit-secret header, for a service that requires it.
	Secret string `json:"secret"`
	// SecretEnv names an environment variable of the VM (Istio: vmConfig.env) holding the
	// secret instead; it wins over Secret when set and not empty.
	SecretEnv string `json:"secret_env"`
	// Breaker configures the circuit breaker in front of the service.
	Breaker *breakerJSON `json:"breaker"`
}

// leaseJSON is rules[].lease.
type leaseJSON struct {
	// Batch is the number of quota units one lease takes from the service, 1 to 10000.
	// Required.
	Batch optInt `json:"batch"`
	// TTL is how long leased units may be spent before they are dropped, 10ms to 1h.
	// Default "1s".
	TTL string `json:"ttl"`
}

// breakerJSON is global.breaker.
type breakerJSON struct {
	// Failures is the number of consecutive failed calls that opens the breaker, 1 to 1000.
	// Default 5.
	Failures optInt `json:"failures"`
	// Cooldown is how long the open breaker sends no call before it lets one probe through,
	// 100ms to 1h. Default "5s".
	Cooldown string `json:"cooldown"`
}

// Config is a parsed, validated and compiled configuration. It is immutable: the plugin
// shares one across all requests, and a new configuration means a new Config.
type Config struct {
	// Enforce is the global switch; when false every rule's Shadow is true.
	Enforce bool
	// LogLevel is the least severe level to log.
	LogLevel LogLevel
	// Response renders quota headers and denied responses.
	Response *Response
	// Global is the global service, or nil when none is configured.
	Global *Global

	rules   []*Rule
	summary string
}

// Rules returns the rules in configuration order. The slice is shared and must not be
// modified.
func (c *Config) Rules() []*Rule { return c.rules }

// Summary returns a one-line description of the configuration for the log, e.g.
// `2 rules: api-per-ip(local, 2 limits), per-key(local, 1 limit, 2 overrides, shadow); enforce=true; headers=ietf`.
func (c *Config) Summary() string { return c.summary }

// Rule is one compiled rule. Its exported fields are read-only.
type Rule struct {
	// Name is the rule's unique name.
	Name string
	// Index is the rule's position in rules[].
	Index int
	// Scope says where the rule counts.
	Scope Scope
	// Shadow is true when the rule must never deny: its own shadow flag, or enforce=false.
	Shadow bool
	// ShadowHeader is the lower-case name of the header to add to the upstream request
	// when the rule would have denied, or "".
	ShadowHeader string
	// MaxKeys is the number of distinct key values to keep state for.
	MaxKeys int
	// FailureMode decides when the shared state cannot be updated.
	FailureMode FailureMode
	// MissingKey says what a request lacking a key part does.
	MissingKey MissingKey

	match       match
	key         []keyPart
	limits      []LimitSpec
	fallback    []LimitSpec
	lease       *Lease
	overrides   map[string]*override
	cost        costSpec
	fingerprint uint64
}

// Fingerprint returns a stable 64-bit hash of what gives the rule's stored state its
// meaning: its own limits (algorithm, quota, window, effective burst, in order), its key
// definition and max_keys. Changing any of them changes the fingerprint, so keys derived
// from it start fresh; names, matches, overrides, cost and response settings do not. An
// override's limits are covered by their LimitSpec.Fingerprint instead, so that adding
// an override does not reset every other client.
func (r *Rule) Fingerprint() uint64 { return r.fingerprint }

// LimitSpec is one limit as enforced: a policy name and its algorithm parameters.
type LimitSpec struct {
	// Name is the policy name used in the RateLimit headers and problem bodies; unique
	// among a rule's limits and across rules.
	Name string
	// Limit is the algorithm and its parameters (Burst 0 means the quota).
	Limit algorithms.Limit
	// Index is the position in its list (the rule's limits or an override's).
	Index int
	// Fingerprint is a stable hash of Limit with its effective burst: state stored for a
	// limit with another fingerprint is not valid for this one.
	Fingerprint uint64
}

// override is one compiled overrides[] element.
type override struct {
	limits    []LimitSpec
	unlimited bool
}

// costSpec is a compiled cost: a constant, or a header with default and max.
type costSpec struct {
	constant int64
	header   string // lower-case; "" for a constant
	def, max int64
}

// Scope is where a rule counts.
type Scope uint8

// Scopes.
const (
	ScopeLocal  Scope = iota // in this proxy's shared data
	ScopeGlobal              // in the global service
	ScopeBoth                // in both; a request must pass both
)

// String returns the name the configuration uses for the scope.
func (s Scope) String() string {
	switch s {
	case ScopeGlobal:
		return "global"
	case ScopeBoth:
		return "both"
	}
	return "local"
}

// FailureMode decides a request when the shared state or service cannot decide it.
type FailureMode uint8

// Failure modes.
const (
	FailAllow FailureMode = iota // let the request through (fail open)
	FailDeny                     // deny the request (fail closed)
)

// String returns the name the configuration uses for the failure mode.
func (f FailureMode) String() string {
	if f == FailDeny {
		return "deny"
	}
	return "allow"
}

// MissingKey is what a request lacking a key part does.
type MissingKey uint8

// Missing-key behaviours.
const (
	MissingKeySkip    MissingKey = iota // the rule does not apply
	MissingKeyDefault                   // the request uses the shared bucket with key ""
)

// LogLevel is a log severity, numbered as proxy-wasm's (types.LogLevel).
type LogLevel uint8

// Log levels.
const (
	LogTrace LogLevel = iota
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
)

var logLevelNames = [...]string{"trace", "debug", "info", "warn", "error", "critical"}

// String returns the name the configuration uses for the level.
func (l LogLevel) String() string {
	if int(l) < len(logLevelNames) {
		return logLevelNames[l]
	}
	return "unknown"
}

// Lease is a compiled rules[].lease: lease Batch units at a time, spend them within TTL.
type Lease struct {
	Batch int64
	TTL   time.Duration
}

// Global is the validated global service configuration.
type Global struct {
	Cluster   string
	Authority string
	Path      string
	Timeout   time.Duration
	// Secret is the value of the x-meshlimit-secret header, or "".
	Secret string
	// BreakerFailures consecutive failures open the breaker for BreakerCooldown.
	BreakerFailures int
	BreakerCooldown time.Duration
}

// FieldError is a configuration error at one field. Path names the field as it appears in
// the document, e.g. "rules[2].limits[0].rate"; it is empty for the document itself.
type FieldError struct {
	Path string
	Msg  string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return "config: " + e.Msg
	}
	return "config: " + e.Path + ": " + e.Msg
}

// ParseConfig decodes, validates and compiles a configuration. Decoding is strict: unknown
// or duplicate fields, wrong types and trailing data are errors. Every error is a
// *FieldError naming its field; when there are several, they are joined with errors.Join
// (one per line), up to 32.
func ParseConfig(data []byte) (*Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &FieldError{Msg: `empty configuration: want a JSON object such as {"rules": [...]} in the WasmPlugin's pluginConfig`}
	}
	var doc configJSON
	if err := decodeStrict(data, &doc); err != nil {
		return nil, err
	}
	var v validator
	c := v.config(&doc)
	if err := v.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// validator collects field errors while compiling.
type validator struct {
	errs []error
}

func (v *validator) failf(path, format string, args ...any) {
	if len(v.errs) < maxErrors {
		v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
}

func (v *validator) err() error {
	switch len(v.errs) {
	case 0:
		return nil
	case 1:
		return v.errs[0]
	}
	return errors.Join(v.errs...)
}

func (v *validator) config(doc *configJSON) *Config {
	c := &Config{Enforce: true, LogLevel: LogInfo}
	if doc.Enforce != nil {
		c.Enforce = *doc.Enforce
	}
	switch doc.LogLevel {
	case "":
	default:
		found := false
		for i, n := range logLevelNames {
			if n == doc.LogLevel {
				c.LogLevel, found = LogLevel(i), true
			}
		}
		if !found {
			v.failf("log_level", "unknown level %q (want trace, debug, info, warn, error or critical)", doc.LogLevel)
		}
	}
	maxKeys := int64(DefaultMaxKeys)
	if doc.MaxKeys.Set {
		maxKeys = doc.MaxKeys.Value
		if maxKeys < 1 || maxKeys > MaxMaxKeys {
			v.failf("max_keys", "%d out of range: want 1 to %d", maxKeys, MaxMaxKeys)
			maxKeys = DefaultMaxKeys
		}
	}
	if doc.Global != nil {
		c.Global = v.global(doc.Global)
	}
	c.Response = v.response(&doc.Response)

	switch n := len(doc.Rules); {
	case n == 0:
		v.failf("rules", "at least one rule is required")
	case n > maxRules:
		v.failf("rules", "%d rules: at most %d are allowed", n, maxRules)
		doc.Rules = doc.Rules[:maxRules]
	}
	names := map[string]int{}
	policies := map[string]string{}
	for i := range doc.Rules {
		path := "rules[" + strconv.Itoa(i) + "]"
		r := v.rule(path, &doc.Rules[i], maxKeys, c)
		r.Index = i
		if r.Name != "" {
			if j, dup := names[r.Name]; dup {
				v.failf(path+".name", "%q is already the name of rules[%d]", r.Name, j)
			}
			names[r.Name] = i
		}
		for j, l := range r.limits {
			lp := path + ".limits[" + strconv.Itoa(j) + "]"
			if prev, dup := policies[l.Name]; dup {
				v.failf(lp+".name", "policy name %q is already used by %s", l.Name, prev)
			}
			policies[l.Name] = lp
		}
		c.rules = append(c.rules, r)
	}
	c.summary = summarize(c)
	return c
}

var (
	ruleNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	policyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
)

func (v *validator) rule(path string, rj *ruleJSON, maxKeys int64, c *Config) *Rule {
	r := &Rule{Name: rj.Name, Shadow: rj.Shadow || !c.Enforce, MaxKeys: int(maxKeys)}
	switch {
	case rj.Name == "":
		v.failf(path+".name", "required")
	case !ruleNameRE.MatchString(rj.Name):
		v.failf(path+".name", "%q is not a valid rule name: want 1 to 64 of [a-z0-9_-], starting with a letter or digit", rj.Name)
	}
	r.match = v.match(path+".match", &rj.Match)

	if len(rj.Key) > maxKeyParts {
		v.failf(path+".key", "%d parts: at most %d are allowed", len(rj.Key), maxKeyParts)
	}
	for i := range rj.Key {
		if p, ok := v.keyPart(path+".key["+strconv.Itoa(i)+"]", &rj.Key[i]); ok {
			r.key = append(r.key, p)
		}
	}
	switch rj.MissingKey {
	case "", "skip":
	case "default":
		r.MissingKey = MissingKeyDefault
	default:
		v.failf(path+".missing_key", "unknown value %q (want skip or default)", rj.MissingKey)
	}

	switch n := len(rj.Limits); {
	case n == 0:
		v.failf(path+".limits", "at least one limit is required")
	case n > maxLimits:
		v.failf(path+".limits", "%d limits: at most %d are allowed", n, maxLimits)
	}
	r.limits = v.limits(path+".limits", rj.Limits, rj.Name)
	r.cost = v.cost(path+".cost", rj.Cost)

	if len(rj.Overrides) > 0 {
		r.overrides = v.overrides(path+".overrides", rj.Overrides, r)
	}
	if rj.ShadowHeader != "" {
		if !isToken(rj.ShadowHeader) {
			v.failf(path+".shadow_header", "%q is not a valid header name", rj.ShadowHeader)
		}
		r.ShadowHeader = strings.ToLower(rj.ShadowHeader)
	}
	if rj.MaxKeys.Set {
		if n := rj.MaxKeys.Value; n < 1 || n > MaxMaxKeys {
			v.failf(path+".max_keys", "%d out of range: want 1 to %d", n, MaxMaxKeys)
		} else {
			r.MaxKeys = int(n)
		}
	}
	switch rj.FailureMode {
	case "", "allow":
	case "deny":
		r.FailureMode = FailDeny
	default:
		v.failf(path+".failure_mode", "unknown value %q (want allow or deny)", rj.FailureMode)
	}
	switch rj.Scope {
	case "", "local":
	case "global":
		r.Scope = ScopeGlobal
	case "both":
		r.Scope = ScopeBoth
	default:
		v.failf(path+".scope", "unknown value %q (want local, global or both)", rj.Scope)
	}
	if r.Scope != ScopeLocal && c.Global == nil {
		v.failf(path+".scope", "%q needs the top-level global object", rj.Scope)
	}
	if lj := rj.Lease; lj != nil {
		l := &Lease{TTL: time.Second}
		switch {
		case r.Scope != ScopeGlobal:
			v.failf(path+".lease", "only rules with scope global lease quota")
		case !lj.Batch.Set:
			v.failf(path+".lease.batch", "required")
		case lj.Batch.Value < 1 || lj.Batch.Value > 10000:
			v.failf(path+".lease.batch", "%d out of range: want 1 to 10000", lj.Batch.Value)
		default:
			l.Batch = lj.Batch.Value
		}
		if lj.TTL != "" {
			d, err := parseDuration(lj.TTL)
			switch {
			case err != nil:
				v.failf(path+".lease.ttl", "%v", err)
			case d < 10*time.Millisecond || d > time.Hour:
				v.failf(path+".lease.ttl", "%s out of range: want 10ms to 1h", lj.TTL)
			default:
				l.TTL = d
			}
		}
		for i := range r.limits {
			if c := r.limits[i].Limit.Capacity(); l.Batch > c {
				v.failf(path+".lease.batch", "%d exceeds the capacity %d of limits[%d]: such a batch could never be granted", l.Batch, c, i)
			}
		}
		r.lease = l
	}
	if len(rj.Fallback) > 0 {
		if r.Scope == ScopeLocal {
			v.failf(path+".fallback", "only rules with scope global or both have a fallback")
		} else if len(rj.Fallback) > maxLimits {
			v.failf(path+".fallback", "%d limits: at most %d are allowed", len(rj.Fallback), maxLimits)
		} else {
			r.fallback = v.limits(path+".fallback", rj.Fallback, rj.Name+"-fallback")
		}
	}
	r.fingerprint = ruleFingerprint(r)
	return r
}

func (v *validator) match(path string, mj *matchJSON) match {
	var m match
	for _, list := range [...]struct {
		name  string
		items []string
	}{{"route_names", mj.RouteNames}, {"hosts", mj.Hosts}, {"methods", mj.Methods}} {
		if len(list.items) > maxListItems {
			v.failf(path+"."+list.name, "%d items: at most %d are allowed", len(list.items), maxListItems)
		}
	}
	for i, rn := range mj.RouteNames {
		if rn == "" {
			v.failf(path+".route_names["+strconv.Itoa(i)+"]", "empty route name")
		}
		m.routeNames = append(m.routeNames, rn)
	}
	for i, h := range mj.Hosts {
		hp := path + ".hosts[" + strconv.Itoa(i) + "]"
		h = strings.ToLower(h)
		switch {
		case h == "":
			v.failf(hp, "empty host")
		case h == "*":
			m.hosts = append(m.hosts, hostPattern{any: true})
		case strings.HasPrefix(h, "*."):
			if strings.IndexByte(h[1:], '*') >= 0 || len(h) == 2 {
				v.failf(hp, "%q: a wildcard is only allowed as a leading \"*.\" followed by a domain", h)
			}
			m.hosts = append(m.hosts, hostPattern{value: h[1:], suffix: true})
		case strings.IndexByte(h, '*') >= 0:
			v.failf(hp, "%q: a wildcard is only allowed as a leading \"*.\" or alone", h)
		default:
			m.hosts = append(m.hosts, hostPattern{value: h})
		}
	}
	for i, meth := range mj.Methods {
		if !isToken(meth) {
			v.failf(path+".methods["+strconv.Itoa(i)+"]", "%q is not a valid method", meth)
		}
		m.methods = append(m.methods, strings.ToUpper(meth))
	}
	if pj := mj.Path; pj != nil {
		pp := path + ".path"
		m.path = v.stringMatch(pp, pj.Exact, pj.Prefix, pj.Regex, "exact, prefix or regex")
		if (m.path.kind == matchExact || m.path.kind == matchPrefix) && !strings.HasPrefix(m.path.value, "/") {
			v.failf(pp, "%q must start with \"/\"", m.path.value)
		}
	}
	if len(mj.Headers) > maxListItems {
		v.failf(path+".headers", "%d items: at most %d are allowed", len(mj.Headers), maxListItems)
	}
	for i := range mj.Headers {
		hj := &mj.Headers[i]
		hp := path + ".headers[" + strconv.Itoa(i) + "]"
		h := headerMatch{name: strings.ToLower(hj.Name), invert: hj.Invert}
		if hj.Name == "" {
			v.failf(hp+".name", "required")
		} else if !isToken(hj.Name) {
			v.failf(hp+".name", "%q is not a valid header name", hj.Name)
		}
		if hj.Present != nil {
			if hj.Exact != nil || hj.Prefix != nil || hj.Regex != nil {
				v.failf(hp, "set exactly one of present, exact, prefix or regex")
			}
			h.cond.kind, h.absent = matchPresent, !*hj.Present
		} else {
			h.cond = v.stringMatch(hp, hj.Exact, hj.Prefix, hj.Regex, "present, exact, prefix or regex")
		}
		m.headers = append(m.headers, h)
	}
	return m
}

// stringMatch compiles the one set field of exact, prefix and regex.
func (v *validator) stringMatch(path string, exact, prefix, re *string, want string) stringMatch {
	n := 0
	var m stringMatch
	if exact != nil {
		n++
		m = stringMatch{kind: matchExact, value: *exact}
	}
	if prefix != nil {
		n++
		m = stringMatch{kind: matchPrefix, value: *prefix}
	}
	if re != nil {
		n++
		m = stringMatch{kind: matchRegex, value: *re}
		if len(*re) > maxRegexLen {
			v.failf(path+".regex", "longer than %d bytes", maxRegexLen)
		} else if c, err := regexp.Compile(`^(?:` + *re + `)$`); err != nil {
			v.failf(path+".regex", "%v", err)
			m.kind = matchNone
		} else {
			m.re = c
		}
	}
	if n != 1 {
		v.failf(path, "set exactly one of %s", want)
	}
	return m
}

func (v *validator) keyPart(path string, kj *keyPartJSON) (keyPart, bool) {
	var p keyPart
	n := 0
	flag := func(b *bool, k keyKind) {
		if b == nil {
			return
		}
		n++
		p.kind = k
		if !*b {
			v.failf(path+"."+k.String(), "must be true (omit the part instead)")
		}
	}
	flag(kj.Path, keyPath)
	flag(kj.Method, keyMethod)
	flag(kj.Host, keyHost)
	flag(kj.RouteName, keyRouteName)
	if kj.ClientIP != nil {
		n++
		p.kind = keyClientIP
		cj := kj.ClientIP
		p.trustedHops = int(v.intIn(path+".client_ip.trusted_hops", cj.TrustedHops, 0, maxTrustedHops))
		p.v4Bits = int(v.intIn(path+".client_ip.ipv4_mask", cj.IPv4Mask, 0, 32))
		p.v6Bits = int(v.intIn(path+".client_ip.ipv6_mask", cj.IPv6Mask, 0, 128))
	}
	if kj.Header != nil {
		n++
		p.kind, p.name = keyHeader, strings.ToLower(*kj.Header)
		if !isToken(*kj.Header) {
			v.failf(path+".header", "%q is not a valid header name", *kj.Header)
		}
	}
	if kj.Query != nil {
		n++
		p.kind, p.name = keyQuery, *kj.Query
		if *kj.Query == "" {
			v.failf(path+".query", "empty parameter name")
		}
	}
	if kj.Constant != nil {
		n++
		p.kind, p.name = keyConstant, *kj.Constant
		if *kj.Constant == "" || len(*kj.Constant) > maxPartLen {
			v.failf(path+".constant", "want 1 to %d bytes", maxPartLen)
		}
	}
	if kj.Property != nil {
		n++
		p.kind, p.property = keyProperty, kj.Property.segments
		if len(p.property) == 0 {
			v.failf(path+".property", "empty property path")
		}
		for _, s := range p.property {
			if s == "" {
				v.failf(path+".property", "empty segment in %q", strings.Join(p.property, "."))
				break
			}
		}
	}
	if n != 1 {
		v.failf(path, "set exactly one of client_ip, header, path, method, host, route_name, query, constant or property")
		return p, false
	}
	return p, true
}

// intIn returns o's value, or lo when unset, reporting a value outside [lo, hi].
func (v *validator) intIn(path string, o optInt, lo, hi int64) int64 {
	if !o.Set {
		return lo
	}
	if o.Value < lo || o.Value > hi {
		v.failf(path, "%d out of range: want %d to %d", o.Value, lo, hi)
		return lo
	}
	return o.Value
}

func (v *validator) limits(path string, ljs []limitJSON, rule string) []LimitSpec {
	out := make([]LimitSpec, 0, len(ljs))
	seen := map[string]int{}
	for i := range ljs {
		lj := &ljs[i]
		lp := path + "[" + strconv.Itoa(i) + "]"
		s := LimitSpec{Name: lj.Name, Index: i}
		if s.Name == "" {
			s.Name = rule
			if len(ljs) > 1 {
				s.Name = rule + "-" + strconv.Itoa(i)
			}
		} else if !policyNameRE.MatchString(s.Name) {
			v.failf(lp+".name", "%q is not a valid policy name: want 1 to 64 of [A-Za-z0-9_.-], starting with a letter or digit", s.Name)
		}
		if j, dup := seen[s.Name]; dup {
			v.failf(lp+".name", "policy name %q is already used by %s[%d]", s.Name, path, j)
		}
		seen[s.Name] = i

		ok := true
		if lj.Rate == "" {
			v.failf(lp+".rate", "required")
			ok = false
		} else if q, w, err := parseRate(lj.Rate); err != nil {
			v.failf(lp+".rate", "%v", err)
			ok = false
		} else {
			s.Limit.Quota, s.Limit.Window = q, w
		}
		algo := lj.Algorithm
		if algo == "" {
			algo = "token_bucket"
		}
		if k, err := algorithms.ParseKind(algo); err != nil {
			v.failf(lp+".algorithm", "unknown algorithm %q (want token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)", algo)
			ok = false
		} else {
			s.Limit.Kind = k
		}
		if lj.Burst.Set {
			if k := s.Limit.Kind; k != algorithms.TokenBucket && k != algorithms.LeakyBucket && k != 0 {
				v.failf(lp+".burst", "only token_bucket and leaky_bucket take a burst, not %s", k)
				ok = false
			} else if lj.Burst.Value < 1 {
				v.failf(lp+".burst", "%d: want a positive integer", lj.Burst.Value)
				ok = false
			}
			s.Limit.Burst = lj.Burst.Value
		}
		if ok {
			if err := s.Limit.Validate(); err != nil {
				v.failf(lp, "%v", err)
			}
		}
		s.Fingerprint = limitFingerprint(s.Limit)
		out = append(out, s)
	}
	return out
}

func (v *validator) cost(path string, cj *costJSON) costSpec {
	c := costSpec{constant: 1}
	switch {
	case cj == nil:
	case cj.object == nil:
		c.constant = v.intIn(path, cj.constant, 1, maxCostValue)
	default:
		o := cj.object
		c.constant = 0
		if o.Header == "" {
			v.failf(path+".header", "required")
		} else if !isToken(o.Header) {
			v.failf(path+".header", "%q is not a valid header name", o.Header)
		}
		c.header = strings.ToLower(o.Header)
		c.def = v.intIn(path+".default", o.Default, 1, maxCostValue)
		c.max = DefaultMaxCost
		if o.Max.Set {
			c.max = v.intIn(path+".max", o.Max, 1, maxCostValue)
		}
		if c.def > c.max {
			v.failf(path+".default", "%d is above max %d", c.def, c.max)
		}
	}
	return c
}

func (v *validator) overrides(path string, ojs []overrideJSON, r *Rule) map[string]*override {
	if len(ojs) > maxOverrides {
		v.failf(path, "%d overrides: at most %d are allowed", len(ojs), maxOverrides)
		return nil
	}
	if len(r.key) == 0 {
		v.failf(path, "overrides need key parts: without them every request has the same key")
		return nil
	}
	m := make(map[string]*override, len(ojs))
	for i := range ojs {
		oj := &ojs[i]
		op := path + "[" + strconv.Itoa(i) + "]"
		if oj.Value == nil {
			v.failf(op+".value", "required")
			continue
		}
		val := *oj.Value
		if val == "" && r.MissingKey != MissingKeyDefault {
			v.failf(op+".value", `"" names the shared bucket of missing_key "default", which this rule does not use`)
		} else if val != "" {
			if err := checkKeyValue(val, r.key); err != nil {
				v.failf(op+".value", "%v", err)
			}
		}
		if _, dup := m[val]; dup {
			v.failf(op+".value", "%q is overridden twice", val)
		}
		o := &override{unlimited: oj.Unlimited}
		switch {
		case oj.Unlimited && len(oj.Limits) > 0:
			v.failf(op, "set limits or unlimited, not both")
		case !oj.Unlimited && len(oj.Limits) == 0:
			v.failf(op, "set limits or unlimited: true")
		case len(oj.Limits) > maxLimits:
			v.failf(op+".limits", "%d limits: at most %d are allowed", len(oj.Limits), maxLimits)
		case !oj.Unlimited:
			o.limits = v.limits(op+".limits", oj.Limits, r.Name)
		}
		m[val] = o
	}
	return m
}

// checkKeyValue checks that an override value is a well-formed key value for the parts:
// the right number of '|'-separated parts, valid escapes, no part longer than maxPartLen,
// and client_ip parts written as AppendKey writes them.
func checkKeyValue(val string, parts []keyPart) error {
	var part []byte
	idx := 0
	flush := func() error {
		if idx >= len(parts) {
			return nil // counted below
		}
		if len(part) == 0 {
			return fmt.Errorf("part %d (%s) is empty, and an empty part is never a key value", idx+1, parts[idx].kind)
		}
		if len(part) > maxPartLen {
			return fmt.Errorf("part %d (%s) is longer than %d bytes: such values are hashed and cannot be overridden", idx+1, parts[idx].kind, maxPartLen)
		}
		if parts[idx].kind == keyClientIP {
			var buf [64]byte
			p := parts[idx]
			want, ok := p.canonicalIP(buf[:0], string(part))
			if !ok {
				return fmt.Errorf("part %d (client_ip) %q is not an IP address", idx+1, part)
			}
			if string(want) != string(part) {
				return fmt.Errorf("part %d (client_ip) %q never matches: the key holds %q", idx+1, part, want)
			}
		}
		return nil
	}
	for i := 0; i < len(val); i++ {
		c := val[i]
		switch c {
		case '\\':
			if i+1 >= len(val) || (val[i+1] != '\\' && val[i+1] != '|') {
				return fmt.Errorf(`invalid escape at byte %d: only \\ and \| are escapes`, i)
			}
			i++
			part = append(part, val[i])
		case '|':
			if err := flush(); err != nil {
				return err
			}
			part = part[:0]
			idx++
		default:
			part = append(part, c)
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if idx+1 != len(parts) {
		return fmt.Errorf("%d parts, but the key has %d (%s); separate parts with \"|\"", idx+1, len(parts), describeKey(parts))
	}
	return nil
}

// canonicalIP appends the key form of an address or prefix written in an override value.
func (p *keyPart) canonicalIP(dst []byte, s string) ([]byte, bool) {
	addrPart, _, _ := strings.Cut(s, "/")
	addr, ok := parseClientAddr(addrPart)
	if !ok || strings.ContainsAny(addrPart, "[]%") || strings.Count(addrPart, ":") == 1 {
		return dst, false
	}
	return p.appendMasked(dst, addr)
}

func describeKey(parts []keyPart) string {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.kind.String()
	}
	return strings.Join(names, ", ")
}

func (v *validator) global(gj *globalJSON) *Global {
	g := &Global{Cluster: gj.Cluster, Authority: gj.Authority, Path: gj.Path, Timeout: DefaultGlobalTimeout,
		Secret: gj.Secret, BreakerFailures: DefaultBreakerFailures, BreakerCooldown: DefaultBreakerCooldown}
	if gj.SecretEnv != "" {
		if s := os.Getenv(gj.SecretEnv); s != "" {
			g.Secret = s
		}
	}
	if b := gj.Breaker; b != nil {
		if b.Failures.Set {
			if n := b.Failures.Value; n < 1 || n > 1000 {
				v.failf("global.breaker.failures", "%d out of range: want 1 to 1000", n)
			} else {
				g.BreakerFailures = int(n)
			}
		}
		if b.Cooldown != "" {
			d, err := parseDuration(b.Cooldown)
			switch {
			case err != nil:
				v.failf("global.breaker.cooldown", "%v", err)
			case d < 100*time.Millisecond || d > time.Hour:
				v.failf("global.breaker.cooldown", "%s out of range: want 100ms to 1h", b.Cooldown)
			default:
				g.BreakerCooldown = d
			}
		}
	}
	if g.Cluster == "" {
		v.failf("global.cluster", "required")
	}
	if g.Authority == "" {
		// Istio cluster names are direction|port|subset|host.
		if f := strings.Split(g.Cluster, "|"); len(f) == 4 && f[3] != "" {
			g.Authority = f[3]
		} else if g.Cluster != "" {
			v.failf("global.authority", "required unless global.cluster is an Istio cluster name (outbound|port||host)")
		}
	}
	if g.Path == "" {
		g.Path = DefaultGlobalPath
	} else if !strings.HasPrefix(g.Path, "/") {
		v.failf("global.path", "%q must start with \"/\"", g.Path)
	}
	if gj.Timeout != "" {
		d, err := parseDuration(gj.Timeout)
		switch {
		case err != nil:
			v.failf("global.timeout", "%v", err)
		case d < time.Millisecond || d > maxGlobalTime:
			v.failf("global.timeout", "%s out of range: want 1ms to 1m", gj.Timeout)
		default:
			g.Timeout = d
		}
	}
	return g
}

// isToken reports whether s is a non-empty RFC 9110 token (header names, methods).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// limitFingerprint hashes one limit's canonical form: algorithm, quota, window and the
// effective burst (an unset burst and a burst equal to the quota hash alike).
func limitFingerprint(l algorithms.Limit) uint64 {
	h := fnv.New64a()
	writeLimit(h, l)
	return h.Sum64()
}

func writeLimit(h interface{ Write([]byte) (int, error) }, l algorithms.Limit) {
	burst := l.Burst
	if burst == 0 {
		burst = l.Quota
	}
	var b [25]byte
	b[0] = byte(l.Kind)
	binary.BigEndian.PutUint64(b[1:], uint64(l.Quota))
	binary.BigEndian.PutUint64(b[9:], uint64(l.Window))
	binary.BigEndian.PutUint64(b[17:], uint64(burst))
	_, _ = h.Write(b[:])
}

// ruleFingerprint hashes the canonical form of what Rule.Fingerprint covers.
func ruleFingerprint(r *Rule) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("meshlimit-rule-v1\x00"))
	for _, l := range r.limits {
		writeLimit(h, l.Limit)
	}
	var b []byte
	b = append(b, 0xff) // end of limits
	for _, p := range r.key {
		b = append(b, byte(p.kind))
		b = strconv.AppendQuote(b, p.name)
		for _, s := range p.property {
			b = strconv.AppendQuote(b, s)
		}
		b = strconv.AppendInt(b, int64(p.trustedHops), 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(p.v4Bits), 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(p.v6Bits), 10)
		b = append(b, ';')
	}
	b = append(b, 0xfe)
	b = strconv.AppendInt(b, int64(r.MaxKeys), 10)
	_, _ = h.Write(b)
	return h.Sum64()
}

func summarize(c *Config) string {
	var b strings.Builder
	n := len(c.rules)
	b.WriteString(strconv.Itoa(n))
	if n == 1 {
		b.WriteString(" rule: ")
	} else {
		b.WriteString(" rules: ")
	}
	for i, r := range c.rules {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s(%s, %d limit", r.Name, r.Scope, len(r.limits))
		if len(r.limits) != 1 {
			b.WriteByte('s')
		}
		if len(r.overrides) > 0 {
			fmt.Fprintf(&b, ", %d override", len(r.overrides))
			if len(r.overrides) != 1 {
				b.WriteByte('s')
			}
		}
		if r.Shadow {
			b.WriteString(", shadow")
		}
		b.WriteByte(')')
	}
	fmt.Fprintf(&b, "; enforce=%t; headers=%s", c.Enforce, c.Response.headerSetNames())
	return b.String()
}

// UnmarshalJSON implements json.Unmarshaler: a string names a part without options, an
// object sets exactly one part.
func (k *keyPartJSON) UnmarshalJSON(b []byte) error {
	if jsonKind(b) == "a string" {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		t := true
		*k = keyPartJSON{}
		switch s {
		case "client_ip":
			k.ClientIP = &clientIPJSON{}
		case "path":
			k.Path = &t
		case "method":
			k.Method = &t
		case "host":
			k.Host = &t
		case "route_name":
			k.RouteName = &t
		default:
			return fmt.Errorf(`unknown key part %q: want "client_ip", "path", "method", "host", "route_name", or an object such as {"header": "x-api-key"}`, s)
		}
		return nil
	}
	type plain keyPartJSON // without this method
	var p plain
	if err := decodeStrict(b, &p); err != nil {
		return err
	}
	*k = keyPartJSON(p)
	return nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *propertyJSON) UnmarshalJSON(b []byte) error {
	switch jsonKind(b) {
	case "a string":
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		p.segments = strings.Split(s, ".")
		return nil
	case "an array":
		var segs []string
		if err := json.Unmarshal(b, &segs); err != nil {
			return errors.New("want a dotted string or an array of strings")
		}
		p.segments = segs
		return nil
	}
	return fmt.Errorf("want a dotted string or an array of strings, got %s", jsonKind(b))
}

// UnmarshalJSON implements json.Unmarshaler: an integer, or an object with a header.
func (c *costJSON) UnmarshalJSON(b []byte) error {
	if jsonKind(b) == "an object" {
		var o costObjectJSON
		if err := decodeStrict(b, &o); err != nil {
			return err
		}
		*c = costJSON{object: &o}
		return nil
	}
	var n optInt
	if err := n.UnmarshalJSON(b); err != nil {
		return fmt.Errorf(`want an integer or an object such as {"header": "x-cost"}, got %s`, jsonKind(b))
	}
	*c = costJSON{constant: n}
	return nil
}

// decodeStrict decodes data into v, a pointer to a configuration type, rejecting unknown
// and duplicate fields (names match exactly, unlike encoding/json's case-insensitive
// matching), wrong types and trailing data, with every error a *FieldError naming its
// field relative to v.
func decodeStrict(data []byte, v any) error {
	if !json.Valid(data) {
		return syntaxError(data)
	}
	var s shapeChecker
	s.check(data, reflect.TypeOf(v).Elem(), "")
	if len(s.errs) == 1 {
		return s.errs[0]
	} else if len(s.errs) > 1 {
		return errors.Join(s.errs...)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &FieldError{Msg: err.Error()} // unreachable after a clean shape check
	}
	return nil
}

// syntaxError describes why data is not valid JSON, with a line and column.
func syntaxError(data []byte) error {
	var x any
	err := json.Unmarshal(data, &x)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:se.Offset], []byte("\n"))
		col := int(se.Offset) - bytes.LastIndexByte(data[:se.Offset], '\n') - 1
		return &FieldError{Msg: fmt.Sprintf("invalid JSON at line %d, column %d: %v", line, col, se)}
	}
	if err == nil {
		err = errors.New("unexpected data")
	}
	return &FieldError{Msg: "invalid JSON: " + err.Error()}
}

// shapeChecker walks a JSON value alongside a Go type and records a *FieldError for each
// mismatch. It only reads values that json.Valid accepted.
type shapeChecker struct {
	errs []error
}

var unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

func (s *shapeChecker) fail(path, format string, args ...any) {
	if len(s.errs) < maxErrors {
		s.errs = append(s.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
}

func (s *shapeChecker) check(data []byte, t reflect.Type, path string) {
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		return // null means absent, as in a protobuf Struct
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		u := reflect.New(t).Interface().(json.Unmarshaler)
		if err := u.UnmarshalJSON(data); err != nil {
			s.addAt(path, err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		s.check(data, t.Elem(), path)
	case reflect.Struct:
		s.object(data, t, path)
	case reflect.Slice:
		if data[0] != '[' {
			s.fail(path, "want an array, got %s", jsonKind(data))
			return
		}
		var items []json.RawMessage
		_ = json.Unmarshal(data, &items) // valid JSON array: cannot fail
		for i, it := range items {
			s.check(it, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		}
	case reflect.Map:
		if data[0] != '{' {
			s.fail(path, "want an object, got %s", jsonKind(data))
			return
		}
		s.eachMember(data, path, func(key string, raw []byte) {
			s.check(raw, t.Elem(), path+"["+strconv.Quote(key)+"]")
		})
	case reflect.String:
		if data[0] != '"' {
			s.fail(path, "want a string, got %s", jsonKind(data))
		}
	case reflect.Bool:
		if data[0] != 't' && data[0] != 'f' {
			s.fail(path, "want true or false, got %s", jsonKind(data))
		}
	default:
		s.fail(path, "unsupported configuration type %s", t)
	}
}

// addAt records err from a nested decoder at path, re-rooting nested field errors.
func (s *shapeChecker) addAt(path string, err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			s.addAt(path, e)
		}
		return
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		s.fail(joinPath(path, fe.Path), "%s", fe.Msg)
		return
	}
	s.fail(path, "%v", err)
}

func joinPath(base, rel string) string {
	switch {
	case rel == "":
		return base
	case base == "":
		return rel
	case rel[0] == '[':
		return base + rel
	}
	return base + "." + rel
}

// object checks a JSON object against the struct type t: exact field names, no duplicates.
func (s *shapeChecker) object(data []byte, t reflect.Type, path string) {
	if data[0] != '{' {
		s.fail(path, "want an object, got %s", jsonKind(data))
		return
	}
	fields := map[string]reflect.Type{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
		names = append(names, name)
	}
	sort.Strings(names)
	s.eachMember(data, path, func(key string, raw []byte) {
		ft, ok := fields[key]
		if !ok {
			s.fail(joinPath(path, key), "unknown field (known fields: %s)", strings.Join(names, ", "))
			return
		}
		s.check(raw, ft, joinPath(path, key))
	})
}

// eachMember calls f for each member of the valid JSON object data, in order, and records
// duplicate names.
func (s *shapeChecker) eachMember(data []byte, path string, f func(key string, raw []byte)) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // '{'
		s.fail(path, "%v", err)
		return
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			s.fail(path, "%v", err)
			return
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			s.fail(joinPath(path, key), "%v", err)
			return
		}
		if seen[key] {
			s.fail(joinPath(path, key), "duplicate field")
			continue
		}
		seen[key] = true
		f(key, raw)
	}
}

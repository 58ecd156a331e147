package rules

import (
	"bytes"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
)

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
	// Shedders are the priority load shedders in configuration order (the shed object is
	// one, unnamed and matching every request); a request is governed by the first that
	// matches it. Empty when none is configured.
	Shedders []*Shed
	// SettleMemory is the most response-body bytes a worker VM holds at once to settle
	// reservations from a JSON field (settle_memory).
	SettleMemory int

	rules   []*Rule
	index   index // the rules by what they match on (Select)
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
	// CountOn is non-nil when the rule charges only the responses that match it.
	CountOn *CountOn
	// CacheDenials is true when the filter keeps the service's denials of a key in its over-limit
	// cache until their Retry-After (rules[].cache_denials; always false for a local rule).
	CacheDenials bool
	// EnforcePercent is the share of key values, 0 to 100, the rule enforces (EnforcedFor).
	EnforcePercent int

	match       match
	key         []keyPart
	sets        []LimitSet // sets[0] is the rule's own limits, then one per override with limits
	fallback    *LimitSet
	overflow    *LimitSet
	lease       *Lease
	overrides   map[string]int // key value → index in sets, or -1 for unlimited
	cost        costSpec
	messages    *Messages // rules[].messages, or nil (messages.go)
	fingerprint uint64
}

// limits returns the rule's own limits.
func (r *Rule) limits() []LimitSpec { return r.sets[0].Limits }

// LimitSets returns every set of limits a key of the rule can be decided against: the rule's own
// first (Index 0), then one per override that sets limits, in configuration order. The slice is
// shared and must not be modified.
func (r *Rule) LimitSets() []LimitSet { return r.sets }

// Limits returns the set of limits that applies to the key value key (as returned by
// AppendKey): the set of the override whose value equals key, else the rule's own. unlimited
// is true when an override declares the key unlimited; set is then nil. The returned set is
// shared and must not be modified. Limits does not allocate.
func (r *Rule) Limits(key []byte) (set *LimitSet, unlimited bool) {
	if len(r.overrides) > 0 {
		if i, ok := r.overrides[string(key)]; ok {
			if i < 0 {
				return nil, true
			}
			return &r.sets[i], false
		}
	}
	return &r.sets[0], false
}

// Fallback returns the limits a global rule applies in the proxy when the service cannot decide,
// or nil.
func (r *Rule) Fallback() *LimitSet { return r.fallback }

// Lease returns the rule's quota lease settings, or nil when it does not lease.
func (r *Rule) Lease() *Lease { return r.lease }

// Overflow returns the limits that the keys without room in the rule's max_keys slots share, or nil
// when the rule's own limits apply to them.
func (r *Rule) Overflow() *LimitSet { return r.overflow }

// LimitSet is one list of limits that keys are decided against together: a rule's own, an
// override's, or a fallback.
type LimitSet struct {
	// Index is the set's position in Rule.LimitSets (0 for a fallback, which is not listed).
	Index int
	// Limits are the limits, in configuration order.
	Limits []LimitSpec
	// Fingerprint combines the limits' fingerprints: state stored for a set with another
	// fingerprint is not valid for this one.
	Fingerprint uint64
	// Slots is the number of distinct key values the set keeps state for: the rule's max_keys,
	// or 1 for an override (it applies to one key value).
	Slots int
	// Override is the key value of an override's set, or "".
	Override string
}

// newLimitSet returns the set of limits with its fingerprint.
func newLimitSet(index int, limits []LimitSpec, slots int, override string) LimitSet {
	fp := uint64(fnv.Offset64)
	for _, l := range limits {
		fp = fnv.Mix(fp, l.Fingerprint)
	}
	return LimitSet{Index: index, Limits: limits, Fingerprint: fp, Slots: slots, Override: override}
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
	// Concurrency is the most requests of a key in flight at once for a concurrency limit,
	// whose Limit is then zero; 0 for a rate limit.
	Concurrency int64
	// ContentBytes is true when the rule's cost is body bytes (rules[].cost request_bytes or
	// settle body_bytes): RateLimit-Policy then says qu="content-bytes".
	ContentBytes bool
	// Index is the position in its list (the rule's limits or an override's).
	Index int
	// Fingerprint is a stable hash of Limit with its effective burst: state stored for a
	// limit with another fingerprint is not valid for this one.
	Fingerprint uint64

	// What the quota fields write of the limit whatever the decision, rendered once at the end of
	// compilation in the structured dialect policyOf (render.go): policy is its policy member
	// (nil for a calendar window, whose w is the period at hand) and policyNext the same after
	// ", "; sfName is the length of the member's leading sf-string (the quoted Name); headNext is
	// ", " then the start of its RateLimit member up to its available value (`, "name";r=`). On a
	// set's first limit, set is the set's limits and setPolicy their policy field in that order
	// (nil when one of them is a calendar window). draft03Next is ", " and its X-RateLimit-Limit
	// member (nil for a calendar window).
	policy, policyNext []byte
	draft03Next        []byte
	headNext           []byte
	sfName             int
	policyOf           *dialect
	set                []LimitSpec
	setPolicy          []byte
}

// costSpec is a compiled cost: a constant, or a header with default and max.
type costSpec struct {
	constant int64
	header   string // lower-case; "" for a constant
	def, max int64
	reserve  *reserveSpec // a cost that is reserved, then settled (settle.go); nil when final
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
	// ResetPoll is how often one worker of the proxy asks the service's reset log which keys an
	// admin reset, so that the proxy forgets them in its shared data too (0: never).
	ResetPoll time.Duration
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
// (one per line), up to 32. They come in one pass: a value of the wrong shape is reported and
// left out, the rest of the document is compiled all the same, and compilation's errors that may
// follow only from what was left out are not reported (see followOn).
func ParseConfig(data []byte) (*Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &FieldError{Msg: `empty configuration: want a JSON object such as {"rules": [...]} in the WasmPlugin's pluginConfig`}
	}
	var doc configJSON
	d := decodeAll(data, &doc)
	if !d.decoded {
		return nil, joinErrors(d.errs)
	}
	var v validator
	c := v.config(&doc)
	errs := d.errs
	for _, e := range v.errs {
		if fe, ok := e.(*FieldError); ok && followOn(fe, d.unsure) {
			continue
		}
		if len(errs) < maxErrors {
			errs = append(errs, e)
		}
	}
	v.errs = errs
	if err := v.err(); err != nil {
		return nil, err
	}
	c.index = newIndex(c.rules)
	return c, nil
}

// followOn reports whether compilation's error e may follow only from a value that decoding left
// out or could not take as written (the paths in unsure, see decoded): e is at such a path, inside
// it or at an object that holds it (the document itself excepted), or elsewhere in the object
// that holds it and names it ("only rules with scope global ..." when scope was a number).
func followOn(e *FieldError, unsure []string) bool {
	for _, p := range unsure {
		if p == "" || within(e.Path, p) || (e.Path != "" && within(p, e.Path)) {
			return true
		}
		if parent, field := splitPath(p); parent != "" && within(e.Path, parent) && mentions(e.Msg, field) {
			return true
		}
	}
	return false
}

// within reports whether path is base or inside it.
func within(path, base string) bool {
	rest, ok := strings.CutPrefix(path, base)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '[')
}

// splitPath splits a field path into the object that holds its field and the field's name, past
// any indices: "rules[0].key[1]" is "rules[0]" and "key".
func splitPath(p string) (parent, field string) {
	for strings.HasSuffix(p, "]") {
		i := strings.LastIndex(p, "[")
		if j := strings.LastIndex(p, `["`); j >= 0 && strings.HasSuffix(p, `"]`) {
			i = j
		}
		if i < 0 {
			break
		}
		p = p[:i]
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// mentions reports whether msg has word as a whole word (not part of a longer name).
func mentions(msg, word string) bool {
	isName := func(c byte) bool {
		return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	for i := 0; word != ""; {
		j := strings.Index(msg[i:], word)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(word)
		if (j == 0 || !isName(msg[j-1])) && (end == len(msg) || !isName(msg[end])) {
			return true
		}
		i = j + 1
	}
	return false
}

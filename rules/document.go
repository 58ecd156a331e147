package rules

import (
	"errors"
	"fmt"
	"strings"
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
	// MaxKeys is the default of rules[].max_keys. Default defaultMaxKeys.
	MaxKeys optInt `json:"max_keys"`
	// SettleMemory bounds the bytes of response bodies one worker VM copies at once to settle
	// reservations from a JSON field (settle.response_json): past it a stream settles without a
	// copy, charged per on_missing. Default defaultSettleMemory.
	SettleMemory optInt `json:"settle_memory"`
	// LogLevel is the least severe level the plugin logs: "trace", "debug", "info",
	// "warn", "error" or "critical". Default "info".
	LogLevel string `json:"log_level"`
	// Global configures the global limit service, required by rules whose scope is
	// "global" or "both".
	Global *globalJSON `json:"global"`
	// Shed configures priority load shedding (see shed.go). Default: none.
	Shed *shedJSON `json:"shed"`
	// Shedders are several shedders, each with a name and a match; a request is governed
	// by the first that matches. Set shed or shedders, not both. Default: none.
	Shedders []shedJSON `json:"shedders"`
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
	// CacheDenials keeps a key the global service denied in the proxy's over-limit cache until the
	// denial's Retry-After, answering it there without calling the service (scope global or both).
	// false asks the service for every request, so an admin reset is seen by the next request, at the
	// cost of one call per request of a denied key. Default true.
	CacheDenials *bool `json:"cache_denials"`
	// Overflow are the limits that every key finding no room in the rule's max_keys slots shares
	// (all such keys together). Default: the rule's own limits.
	Overflow []limitJSON `json:"overflow"`
	// Scope is where the rule counts: "local" (this proxy), "global" (the global service)
	// or "both". Default "local".
	Scope string `json:"scope"`
	// CountOn charges the rule only for responses that match (see count_on.go). Default:
	// every admitted request is charged when it arrives.
	CountOn *countOnJSON `json:"count_on"`
	// EnforcePercent is the share of key values, 0 to 100, the rule enforces; the others
	// are decided in shadow (see concurrency.go). Default 100.
	EnforcePercent optInt `json:"enforce_percent"`
	// Messages makes the limits count the messages of gRPC streams and WebSocket sessions
	// instead of requests (see messages.go). Default: requests.
	Messages *messagesJSON `json:"messages"`
}

// matchJSON is rules[].match. Every condition that is present must hold.
type matchJSON struct {
	// RouteNames matches the Envoy route name (xds.route_name) exactly.
	RouteNames []string `json:"route_names"`
	// Hosts matches :authority compared lower-case without its port and trailing dot: exact
	// names, "*.suffix" or "*".
	Hosts []string `json:"hosts"`
	// Path matches the normalized path (no query, unreserved escapes decoded, slashes
	// merged, dot segments resolved).
	Path *pathMatchJSON `json:"path"`
	// Methods matches :method, case-insensitively.
	Methods []string `json:"methods"`
	// Headers must all hold.
	Headers []headerMatchJSON `json:"headers"`
}

// pathMatchJSON sets exactly one of exact, prefix and regex.
type pathMatchJSON struct {
	Exact      *string `json:"exact"`       // the whole path; starts with "/", normalized
	Prefix     *string `json:"prefix"`      // a prefix of the path; starts with "/", normalized
	Regex      *string `json:"regex"`       // RE2 syntax, must match the whole path
	IgnoreCase bool    `json:"ignore_case"` // exact and prefix compare case-insensitively
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
	// IPv4Mask is the prefix length IPv4 addresses are masked to, 1 to 32; 32 keeps the
	// whole address. Default 32.
	IPv4Mask optInt `json:"ipv4_mask"`
	// IPv6Mask is the prefix length IPv6 addresses are masked to, 1 to 128; 128 keeps the
	// whole address. Default 64 (one subscriber's network).
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
	// Rate is "<quota>/<window>", e.g. "100/s", "1000/h", "5/30s", or a calendar rate,
	// "<quota>/day", "/week", "/month" or "/year" (calendar.go). Required unless
	// Concurrency is set.
	Rate string `json:"rate"`
	// Concurrency, instead of Rate, limits the requests of a key in flight at once, 1 to
	// maxConcurrency (see concurrency.go).
	Concurrency optInt `json:"concurrency"`
	// Algorithm is "token_bucket", "leaky_bucket", "fixed_window", "sliding_log" or
	// "sliding_window". Default "token_bucket".
	Algorithm string `json:"algorithm"`
	// Burst is the bucket capacity of the bucket algorithms. Default: the quota.
	Burst optInt `json:"burst"`
	// CalendarOffset is the fixed UTC offset of a calendar rate ("10000/month"), "Z" or ±hh:mm
	// (calendar.go). Default (absent or null): UTC. An empty string is refused.
	CalendarOffset *string `json:"calendar_offset"`
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
	Max     optInt `json:"max"`     // larger values are charged max; default defaultMaxCost
	// RequestJSON, RequestBytes, MaxBody and Settle reserve a cost and settle it (settle.go).
	RequestJSON  string `json:"request_json"`  // dotted path of a request body field
	RequestBytes bool   `json:"request_bytes"` // the request body bytes
	MaxBody      optInt `json:"max_body"`      // bytes of a body read; default defaultMaxBody
	// PromptBytes, with request_json, adds a prompt estimate to the reservation: one unit per
	// PromptBytes bytes of the request body (1 to 1024; default: none).
	PromptBytes optInt      `json:"prompt_bytes"`
	Settle      *settleJSON `json:"settle"`
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
	// Default defaultBody for "text", no detail for "problem_json".
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
	// EffectiveWindowJitter is the most every t (the effective window) of a response is
	// randomly lengthened by. Default 0.
	EffectiveWindowJitter string `json:"effective_window_jitter"`
	// ExplainHeader, when set, names a header added to every denied response with the
	// name of the rule that denied it. Default: none.
	ExplainHeader string `json:"explain_header"`
	// PartitionKey adds the pk parameter (a keyed hash of the rule's key value) to every member
	// of the ietf header set. Default false.
	PartitionKey bool `json:"partition_key"`
	// PartitionKeySecret keys that hash: 16 to 256 bytes. Default: none (the hash is then keyed
	// only by the rule's fingerprint, which anyone who knows the configuration can recompute).
	PartitionKeySecret string `json:"partition_key_secret"`
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
	// ResetPoll is how often one worker of the proxy reads the service's reset log and forgets
	// the keys an admin reset, 100ms to 1h; "0s" or "off" never reads it. Default "1s".
	ResetPoll string `json:"reset_poll"`
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

// UnmarshalJSON implements json.Unmarshaler: a string names a part without options, an
// object sets exactly one part.
func (k *keyPartJSON) UnmarshalJSON(b []byte) error {
	if jsonKind(b) == "a string" {
		s := unquoteJSON(trimJSONSpace(b))
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
			return errorf(`unknown key part %q: want "client_ip", "path", "method", "host", "route_name", or an object such as {"header": "x-api-key"}`, s)
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
		p.segments = strings.Split(unquoteJSON(trimJSONSpace(b)), ".")
		return nil
	case "an array":
		var segs []string
		if err := decodeStrict(b, &segs); err != nil {
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
		if jsonKind(b) == "a number" {
			return err // out of range, or not an integer: say which
		}
		return fmt.Errorf(`want an integer or an object such as {"header": "x-cost"}, got %s`, jsonKind(b))
	}
	*c = costJSON{constant: n}
	return nil
}

// decodeStrict decodes data into v, a pointer to a configuration type, rejecting unknown
// and duplicate fields (names match exactly, unlike encoding/json's case-insensitive
// matching), wrong types and trailing data, with every error a *FieldError naming its
// field relative to v.

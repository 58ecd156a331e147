package rules

import (
	"time"

	"github.com/meshlimit/meshlimit/wire"
)

// The defaults and bounds of the configuration, in one table. docs/configuration.md is the
// user-facing reference; it must agree with these. What the decision service accepts is wire's:
// the bounds below that a global rule sends are taken from it, and global_bounds.go checks the
// descriptors and keys of a configuration against it.
const (
	// DefaultGlobalPath is the path of the global service's decision endpoint: the contract's.
	DefaultGlobalPath = wire.Path

	defaultMaxKeys         = 10000                   // max_keys: key values a rule keeps state for
	maxMaxKeys             = 1 << 20                 // the largest max_keys (2^20)
	defaultStatus          = 429                     // response.status: of a denied request
	defaultBody            = "rate limit exceeded\n" // response.body: of a denied request
	defaultGlobalTimeout   = 20 * time.Millisecond   // global.timeout (as Envoy's ratelimit filter)
	minGlobalTimeout       = time.Millisecond
	maxGlobalTimeout       = time.Minute
	defaultBreakerFailures = 5 // global.breaker.failures: consecutive failed calls open the breaker
	maxBreakerFailures     = 1000
	defaultBreakerCooldown = 5 * time.Second // global.breaker.cooldown: an open breaker's pause
	minBreakerCooldown     = 100 * time.Millisecond
	maxBreakerCooldown     = time.Hour
	defaultResetPoll       = time.Second // global.reset_poll: how often a proxy reads the reset log
	minResetPoll           = 100 * time.Millisecond
	maxResetPoll           = time.Hour
	maxLeaseBatch          = 10000 // rules[].lease.batch
	defaultLeaseTTL        = time.Second
	minLeaseTTL            = 10 * time.Millisecond
	maxLeaseTTL            = time.Hour
	defaultMaxCost         = 1_000_000 // rules[].cost.max: caps a cost read from a header
	maxCostValue           = 1_000_000_000
	// defaultMaxBody is how many bytes of a body a rule reads for a JSON field when it sets no
	// max_body: the request body it reserves from, or one response body (or SSE event).
	defaultMaxBody = 64 << 10
	maxPromptBytes = 1024 // cost.prompt_bytes: bytes of request body per unit of the prompt estimate
	// settle_memory: the response bytes one VM copies at once to settle, by default 32 MiB (512
	// streams at the default max_body), at most 512 MiB (well below what traps a VM).
	defaultSettleMemory = 32 << 20
	maxSettleMemory     = 512 << 20
	maxMaxBody          = 1 << 20
	maxJSONPath         = 8           // segments of a request_json or response_json path
	minPenalty          = time.Second // rules[].count_on.penalty
	maxPenalty          = 24 * time.Hour
	// maxConcurrency is the largest concurrency limit: a global one is sent as the quota of a
	// permit descriptor, which the service bounds so.
	maxConcurrency = wire.MaxConcurrency

	maxRules           = 256
	maxLimits          = 8 // of a rule, an override, a fallback or an overflow
	maxKeyParts        = 8
	maxOverrides       = 100_000
	maxListItems       = 256 // route_names, hosts, methods, headers of one match; classes, routes of a shedder
	maxStatusRanges    = 32  // count_on.status
	maxResponseHeaders = 32  // count_on.headers
	maxShedders        = 16
	maxRegexLen        = 1024
	maxNameLen         = 64 // policy and shedder names, JSON path segments
	// maxRuleName bounds rules[].name. A rule name is sent as is in every descriptor key (the
	// compile-time check below fails if the configuration allowed one that wire would hash), so
	// that the keys the service and the admin name stay readable.
	maxRuleName     = 64
	maxBodyLen      = 16 << 10 // response.body
	maxExtraHeaders = 32       // response.headers
	maxHeaderValue  = 8 << 10
	maxTrustedHops  = 64
	maxJitter       = time.Hour // response.retry_after_jitter
	minPKSecret     = 16        // response.partition_key_secret, in bytes
	maxPKSecret     = 256
	maxErrors       = 32 // errors one ParseConfig reports

	// Default prefix lengths of the client_ip key part. An IPv4 address is what one subscriber
	// usually gets; an IPv6 subscriber usually gets a whole /64 (RFC 6177, and SLAAC needs one),
	// so keying on the whole IPv6 address would give one client 2^64 buckets.
	defaultIPv4Mask = 32
	defaultIPv6Mask = 64

	// maxRegexProgram bounds the size of a compiled regex, counted as the instructions of its
	// regexp/syntax program (anchors included), like Envoy's re2.max_program_size (100 RE2
	// instructions by default). Go's instruction count runs somewhat above RE2's for the same
	// expression, so the bound is 200: "/api/v[0-9]+/(users|orders)/[0-9a-f-]{36}" needs about 70,
	// while counted repetitions of repetitions, such as ".*(?:.?){1000}" (over 2,000), are refused.
	// A match costs at most the program size per input byte, and the input is bounded by
	// maxRegexInput.
	maxRegexProgram = 200
)

// The bounds of what a request makes the rules do, whatever it holds.
const (
	// maxPartLen is the longest part value kept verbatim in a key; a longer one is hashed.
	maxPartLen = 256
	// maxXFFItem bounds one x-forwarded-for entry or source address worth parsing:
	// "[" + a full IPv6 literal with an IPv4 tail + "%" + a zone + "]:65535" fits in it.
	maxXFFItem = 96
	// maxRegexInput is the longest value, in bytes, a regex is run on. A longer value is not
	// matched against the regex: the condition holds whatever the regex and invert say, so an
	// oversized value can make a rule apply but never lets a request escape one. Together with
	// the program-size bound (maxRegexProgram) it bounds the work of one regex on one value.
	maxRegexInput = 4096
)

// maxOverrideLimits bounds the limits of the configuration's distinct override limit lists
// (overrides whose limits compile alike share one list, and count once), as maxOverrides bounds
// its overrides: what a VM holds for them is bounded, well under Envoy's 1 GiB per VM at both
// bounds (docs/configuration.md "Memory per override", BenchmarkConfigureMemory; docs/envoy-host.md §7).
const maxOverrideLimits = 100_000

// maxOverrideLimitsWritten bounds the limits the configuration's overrides write, shared or not:
// the decoded document, most of a VM's peak while it compiles, holds every one.
const maxOverrideLimitsWritten = 200_000

// A rule name is never hashed in a descriptor key (see maxRuleName): the constant below overflows
// a uint if the configuration allowed a longer name than wire sends as is.
const _ uint = wire.MaxRuleBytes - maxRuleName

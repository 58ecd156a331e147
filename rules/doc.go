// Package rules is meshlimit's pure model of a plugin configuration: the JSON document, its strict
// decoding, and what it compiles to (rules that match requests, build keys, choose limits and costs,
// and the rendering of quota fields and denials).
//
// It knows nothing of proxy-wasm: requests are read through the Request interface, and everything it
// returns is plain data, so the configuration can be validated, tested and fuzzed natively, by
// envoy/ (which validates shipped configurations), by the admin tools and by the filter. Besides the
// standard library it imports only algorithms (the limits it compiles), shed (the load shedders),
// wire (the decision service's bounds and key encoder, which global rules are checked against),
// its leaf rules/body (the reading of JSON and event-stream bodies), and the leaves internal/fnv,
// internal/siphash and internal/sfv (the RFC 9651 encoder of the quota fields); the import-policy
// test (internal/depcheck) enforces it.
//
// The entry point is ParseConfig. A Config is immutable once compiled; Rule.Matches, Rule.AppendKey,
// Rule.Limits and Rule.Cost, and Response.AppendAllowed and Response.Deny do not allocate, so the
// filter can call them on every request.
//
// The files, by concept:
//   - the configuration: document.go (the JSON document), decode.go (strict decoding), units.go
//     (durations and rates), bounds.go (every default and bound, in one table), config.go (the
//     compiled types and ParseConfig), and the compilers compile.go (the configuration and its
//     rules), compile_match.go, compile_key.go, compile_limits.go, compile_overrides.go,
//     compile_global.go and compile_response.go; global_bounds.go checks global rules against
//     the decision service's bounds; fingerprint.go names the state a rule's definition gives
//     meaning to; explain.go says what a valid configuration's rules do (Explain, for
//     cmd/meshlimit-check);
//   - the request model: match.go (the Request interface and matching), path.go (path
//     normalization), key.go, key_query.go and key_clientip.go (key values), cost.go, settle.go
//     (reserve, then settle), count_on.go, cache_denials.go, concurrency.go and shed.go;
//   - the response fields: response.go (denials), quota.go (RateLimit-Policy, RateLimit and
//     X-RateLimit-*), dialect.go (the quota header sets of response.rate_limit_headers, one entry
//     per dialect), partition.go (the pk parameter).
package rules

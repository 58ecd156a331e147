// Package rules is meshlimit's pure model of a plugin configuration: the JSON document, its strict
// decoding, and what it compiles to (rules that match requests, build keys, choose limits and costs,
// and the rendering of quota fields and denials).
//
// It knows nothing of proxy-wasm: requests are read through the Request interface, and everything it
// returns is plain data. It imports only the standard library, algorithms and the leaf packages
// under internal/ (enforced by the import-policy test), so the configuration can be validated,
// tested and fuzzed natively, by envoy/ (which validates shipped configurations) and by the filter.
//
// The entry point is ParseConfig. A Config is immutable once compiled; Rule.Matches, Rule.AppendKey,
// Rule.Limits and Rule.Cost, and Response.AppendAllowed and Response.Deny do not allocate, so the
// filter can call them on every request.
package rules

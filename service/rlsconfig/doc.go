// Package rlsconfig reads envoyproxy/ratelimit's YAML configuration and matches Envoy's rate
// limit descriptors against it, as envoyproxy/ratelimit does, so that meshlimit-service can
// answer Envoy's rate limit service protocol (package rls) from the same files.
//
// A directory holds one file per domain:
//
//	domain: mongo_cps
//	descriptors:
//	  - key: database
//	    value: users
//	    rate_limit:
//	      unit: second
//	      requests_per_unit: 500
//
// Load parses a set of files strictly: an unknown or misplaced field, a value of the wrong
// type, a duplicate domain or descriptor, a bad unit, or unlimited with a unit is an *Error
// naming the file, the line and the field. A Config is immutable and safe for concurrent use;
// a Watcher reloads the directory when its files change and keeps the last good Config when
// they are bad.
//
// # Matching
//
// Config.Match walks a request's entries from the domain down: at each level the rule with
// the entry's key and value, else the first rule (in file order) whose value is a wildcard
// pattern that the value matches ('*' matches any run of characters, several are allowed),
// else the rule with the key alone. A rate limit applies only when it is on the rule matched
// by the request's last entry; a request whose entries run past the rules, or stop above a
// limit, gets none. An empty value matches only the key-only rule.
//
// # Extensions and refusals
//
// rate_limit.algorithm (a meshlimit extension) selects one of meshlimit's five algorithms
// (token_bucket, leaky_bucket, fixed_window, sliding_log, sliding_window) for a descriptor;
// without it the descriptor counts as envoyproxy/ratelimit does (see package rls).
// share_threshold makes every value a wildcard matches count together (Rule.Shared), and
// quota_mode makes a descriptor deny the request only with every other quota-mode descriptor
// (Rule.QuotaMode). value_to_metric names the descriptor's metrics by the values sent.
//
// # Metadata
//
// A descriptor's metadata (Rule.Metadata, which package rls returns to Envoy as dynamic
// metadata) is read as envoyproxy/ratelimit reads it into a google.protobuf.Struct, through
// yaml.v2: plain scalars by YAML 1.1's rules (yes, on and y are true; 0x1F, 017 and 1_000 are
// numbers; .inf and .nan the special doubles; a date stays a string), quoted and block scalars as
// strings, explicit tags obeyed, every number a double. The keys of the metadata's own mapping
// are taken as written, those of the mappings below it as their values print in Go (yes: is
// "true", 1.0: is "1"); a merge key (<<) writes its mappings' entries over what the mapping holds
// so far, the earlier of a list winning, and a key written after it wins in turn. meshlimit
// refuses what the peer reads by chance or loses without a word (a key written twice, keys that
// become the same string, a null key) and what Envoy could not parse or every answer would
// carry in bulk: metadata nested more than 20 levels deep or of more than 4096 values.
package rlsconfig

// Package rls serves Envoy's rate limit service protocol (envoy.service.ratelimit.v3,
// ShouldRateLimit over gRPC) and envoyproxy/ratelimit's /json endpoint from envoyproxy/
// ratelimit's YAML configuration (package rlsconfig), on meshlimit's stores, so that a user
// of envoyproxy/ratelimit can point Envoy's ratelimit filter at meshlimit-service unchanged.
//
// The answers are envoyproxy/ratelimit's (its main branch, default settings):
//
//   - Each descriptor is matched as rlsconfig.Config.Match describes; a descriptor's limit
//     field (Envoy's override) replaces the match entirely, as long as the domain exists.
//   - A limit counts in fixed windows aligned to the Unix epoch, keyed by the domain, the
//     entries as sent and the unit (service.WindowCounter): the configured requests_per_unit is
//     not part of the key, so counts survive a reload and an override with the same unit
//     shares the counter. A wildcard level with share_threshold puts its pattern in the key in
//     place of the value sent, so every value it matches counts together. The descriptor is OVER_LIMIT when the count after this call exceeds
//     requests_per_unit; limit_remaining is the difference (0 when over) and
//     duration_until_reset the time to the end of the window, in whole seconds.
//   - Every descriptor is charged, even after one is over the limit
//     (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false); a descriptor sent twice is charged
//     twice, in order. hits_addend 0 in the request means 1; a descriptor's hits_addend
//     overrides it, and 0 there checks without charging.
//   - unlimited: OK with limit_remaining 4294967295 and nothing counted. shadow_mode: OK, with
//     limit_remaining 0 once over. A matched limit's replaces drops, across the request, every
//     limit of that name (OK, not counted).
//   - overall_code is OVER_LIMIT when a descriptor not in quota_mode is, or when every
//     quota_mode descriptor of the request is.
//   - With Config.DynamicMetadata (the peer's RESPONSE_DYNAMIC_METADATA=true), every answer
//     carries dynamic_metadata, which Envoy's filter stores under envoy.filters.http.ratelimit:
//     the domain, each descriptor's entries ("key=value"), override and hits_addend, the
//     request's hits_addend, and under "metadata" the metadata of the rules of the descriptors
//     that passed (a limit from a rule answered OK: shadow mode over its limit passed, quota
//     mode over it did not), merged in request order, the first value of a key winning.
//
// With rate_limit.algorithm (a meshlimit extension) a descriptor is decided by that algorithm
// with requests_per_unit per unit instead: a denied request is then not counted, as everywhere
// else in meshlimit, and hits_addend 0 answers OK with the limit and nothing counted.
package rls

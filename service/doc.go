// Package service is meshlimit's global decision service: an HTTP/JSON API that decides
// batches of rate-limit descriptors against one shared store, so that every proxy of a mesh
// counts against the same limits.
//
// The layers depend in one direction: the HTTP Handler decodes and validates a request, the
// Limiter applies the multi-descriptor policy and records metrics, and a Store decides one
// descriptor atomically. Two stores implement the same contract:
//
//   - MemoryStore, the embedded default: the algorithms package over sharded, mutex-guarded
//     maps, with idle keys swept in the background and a bound on the number of keys. It keeps
//     state in one process, so it limits globally only with a single service replica.
//   - RedisStore: one Lua script per algorithm (lua/*.lua), a transcription of the algorithms
//     package's integer formulas that computes identical decisions, called with EVALSHA through
//     an auto-pipelining client. Works with standalone Redis and Redis Cluster.
//
// The wire API is documented in API.md next to this file; its request and answer, their
// bounds, encoders and decoders are package wire, which the filter imports too. The handler
// decodes strictly (wire.DecodeRequest) and answers every error in JSON. ConnLimiter bounds
// the connections a server holds; cmd/meshlimit-service serves the handler through one.
//
// # Several descriptors
//
// A request is allowed only if every descriptor is. Descriptors are decided in request order,
// each atomically, and evaluation stops at the first denial (envoyproxy/ratelimit's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT): descriptors after it are not charged and are
// reported as skipped, while descriptors before it stay charged. There is no cross-descriptor
// transaction, because the descriptors' keys may live on different Redis Cluster slots; a
// denied request can therefore consume quota from the descriptors listed before the one that
// denied it. Callers should list the most restrictive descriptor first.
//
// # Security
//
// An optional shared secret (header x-meshlimit-secret) keeps stray clients out of
// /v1/check. It is not transport security: encryption and peer identity between proxy and
// service are Istio's job (mTLS).
package service

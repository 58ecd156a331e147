// Package service is meshlimit's global decision service: an HTTP/JSON API that decides
// batches of rate-limit descriptors against one shared store, so that every proxy of a mesh
// counts against the same limits.
//
// The package holds the API and what every store shares:
//
//   - Handler, the whole HTTP API on one port (NewHandler): /v1/check, the reset log the
//     proxies poll (/v1/resets), the admin API (/v1/admin/), envoyproxy/ratelimit's /json when
//     package rls provides it, /healthz, /readyz and /metrics. The binary, the demo and the
//     tests all serve this one handler.
//   - Store, the contract of a store, as one interface of its capabilities: decisions
//     (Request), window counters (WindowCounter), settles (SettleStore), concurrency permits
//     (PermitStore), the admin's inspection and reset of keys (KeyStore) and the reset log
//     (ResetLog). Package memstore keeps the state in this process (one service replica
//     only); package redisstore in Redis, standalone or Cluster, with one Lua script per
//     algorithm; package storetest is the contract's test suite, which both run.
//   - Metrics (Prometheus) and ConnLimiter (a bound on the connections a server holds;
//     cmd/meshlimit-service serves the handler through one).
//
// The layers depend in one direction: the Handler decodes and validates a request, a limiter
// applies the multi-descriptor policy and records metrics, and the Store decides one
// descriptor atomically. The wire API is documented in API.md next to this file; its request
// and answer, their bounds, encoders and decoders are package wire, which the filter imports
// too. The handler decodes strictly (wire.DecodeRequest) and answers every error in JSON.
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
// /v1/check and /v1/resets; the admin API has a bearer token of its own. The secret is not
// transport security: encryption and peer identity between proxy and service are Istio's job
// (mTLS).
package service

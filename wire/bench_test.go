package wire

import (
	"testing"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

// benchBody is a check of two descriptors as the filter sends it.
var benchBody = AppendRequestEnd(
	AppendDescriptor(
		AppendDescriptor(AppendRequestStart(nil), 0,
			Key{Plugin: "istio-system.meshlimit", Rule: "per-tenant", Fingerprint: 0x5f3a9c1d2e4b6a78, Value: "tenant-1234"},
			algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Second, Burst: 200}, 1),
		1, Key{Plugin: "istio-system.meshlimit", Rule: "per-ip", Fingerprint: 0x1234, Value: "203.0.113.7"},
		algorithms.Limit{Kind: algorithms.SlidingWindow, Quota: 1000, Window: time.Minute}, 1))

func BenchmarkDecodeRequest(b *testing.B) {
	var req Request
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		if err := DecodeRequest(benchBody, DecodeOptions{}, &req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendRequest(b *testing.B) {
	buf := make([]byte, 0, 1024)
	k := Key{Plugin: "istio-system.meshlimit", Rule: "per-tenant", Fingerprint: 0x5f3a9c1d2e4b6a78, Value: "tenant-1234"}
	l := algorithms.Limit{Kind: algorithms.TokenBucket, Quota: 100, Window: time.Second, Burst: 200}
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRequestEnd(AppendDescriptor(AppendDescriptor(AppendRequestStart(buf[:0]), 0, k, l, 1), 1, k, l, 1))
	}
}

func BenchmarkDecodeAnswer(b *testing.B) {
	body := AppendAnswerStart(nil, false)
	body = AppendDecision(body, 0, Decision{Allowed: true, Limit: 100, Remaining: 42, ResetMs: 580})
	body = AppendAnswerEnd(AppendDecision(body, 1, Decision{Limit: 1000, ResetMs: 119000, RetryAfterMs: 2350}))
	dst := make([]Decision, 0, MaxDescriptors)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeAnswer(body, 2, dst); err != nil {
			b.Fatal(err)
		}
	}
}

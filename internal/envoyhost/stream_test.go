package envoyhost_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

func TestLocalReplyIsDeferredAndForcesStop(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{})
	res := roundTrip(t, p.VM(0), op("reply", "x-code", "429"))

	require.NotNil(t, res.LocalReply)
	assert.Equal(t, &envoyhost.LocalReply{
		Status:     429,
		Headers:    envoyhost.Headers{{"x-reason", "test"}},
		Body:       []byte("denied"),
		GRPCStatus: -1,
		Details:    "guest_reply",
	}, res.LocalReply)
	assert.Nil(t, res.Upstream, "the guest returned Continue, but a local reply forces stop")
	assert.Equal(t, envoyhost.Headers{
		{":status", "429"}, {"x-reason", "test"}, {"content-length", "6"}, {"content-type", "text/plain"},
		{"x-guest-response", "2"},
	}, res.Downstream, "the local reply passes through proxy_on_response_headers")
	m := p.Process().Metrics()
	assert.Equal(t, int64(1), m["after_reply_ok"].Value, "the request headers stay writable until the call returns")
	assert.Equal(t, int64(1), m["second_reply_bad_argument"].Value, "a second local reply is BadArgument")
	assert.Equal(t, int64(1), m["deletes"].Value)
}

func TestAFailedVMAnswers503(t *testing.T) {
	tests := []struct {
		name     string
		req      envoyhost.Headers
		cfg      envoyhost.Config
		wantFail string
	}{
		{name: "after a panic", req: op("panic"), wantFail: "Function: proxy_on_request_headers failed: wasm error: unreachable"},
		{name: "after a sleep on a #427 host", req: op("sleep"), wantFail: "proxy_on_request_headers failed"},
		{name: "after a host call from inside the allocator", req: op("mallochost"),
			wantFail: "restricted_callback (env.proxy_get_shared_data)"},
		{name: "after running out of its memory cap", req: op("alloc", "x-mib", "32"),
			cfg: envoyhost.Config{MaxMemoryPages: 256}, wantFail: "proxy_on_request_headers failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Workers = 1
			p := newPlugin(t, "guest", tc.cfg)
			res := roundTrip(t, p.VM(0), tc.req)
			require.NotNil(t, res.LocalReply)
			assert.Equal(t, &envoyhost.LocalReply{Status: 503, GRPCStatus: 14, Details: "wasm_fail_stream"}, res.LocalReply)
			assert.Equal(t, envoyhost.Headers{{":status", "503"}}, res.Downstream, "no guest call for a failure reply")
			require.Error(t, p.VM(0).Failed())
			assert.Contains(t, p.VM(0).Failed().Error(), tc.wantFail)

			created := p.Process().Metrics()["streams_created"].Value
			res = roundTrip(t, p.VM(0), op(""))
			require.NotNil(t, res.LocalReply, "later streams on the failed VM get 503 too")
			assert.Equal(t, 503, res.LocalReply.Status)
			assert.Equal(t, created, p.Process().Metrics()["streams_created"].Value, "without calls into the VM")

			res = roundTrip(t, p.VM(1), op(""))
			assert.Nil(t, res.LocalReply, "other VMs are unaffected")
			assert.NoError(t, p.VM(1).Failed())
		})
	}
}

func TestProcExitReturnsToTheGuestLikeEnvoy(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{})
	res := roundTrip(t, p.VM(0), op("exit"))
	assert.Equal(t, "1", replyHeader(t, res, "x-after-exit"))
	assert.NoError(t, p.VM(0).Failed())
	assert.Contains(t, p.Logs(), envoyhost.LogEntry{VM: 0, Level: envoyhost.LogTrace, Message: "wasi_unstable proc_exit"})
}

func TestMemoryCapBoundsTheVM(t *testing.T) {
	const pages = 512 // 32 MiB
	p := newPlugin(t, "guest", envoyhost.Config{MaxMemoryPages: pages})
	res := roundTrip(t, p.VM(0), op("alloc", "x-mib", "4"))
	assert.Equal(t, "4", replyHeader(t, res, "x-held"))
	res = roundTrip(t, p.VM(0), op("alloc", "x-mib", "64"))
	require.NotNil(t, res.LocalReply)
	assert.Equal(t, 503, res.LocalReply.Status)
	assert.LessOrEqual(t, p.VM(0).MemoryBytes(), uint64(pages*65536))
}

func TestFailOpenPassesStreamsOfAFailedVM(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{FailOpen: true})
	res := roundTrip(t, p.VM(0), op("panic"))
	assert.Nil(t, res.LocalReply)
	assert.NotNil(t, res.Upstream)
	require.Error(t, p.VM(0).Failed())
	res = roundTrip(t, p.VM(0), op(""))
	assert.Nil(t, res.LocalReply)
	_, guest := res.Upstream.Get("x-guest")
	assert.False(t, guest, "the failed VM is not called")
}

func TestPollOneoffIsReported(t *testing.T) {
	tests := []struct {
		name      string
		gen       envoyhost.Generation
		req       envoyhost.Headers
		wantReply map[string]string
	}{
		{"returns ENOSYS on a #427 host", envoyhost.Gen427, op("poll"), map[string]string{"x-errno": "52"}},
		{"reports no events on a #533 host", envoyhost.Gen533, op("poll"), map[string]string{"x-errno": "0"}},
		{"lets a Go sleep finish on a #533 host", envoyhost.Gen533, op("sleep"), map[string]string{"x-slept": "1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlugin(t, "guest", envoyhost.Config{Generation: tc.gen})
			require.Zero(t, p.PollOneoffCalls(), "starting the plugin does not sleep")
			res := roundTrip(t, p.VM(0), tc.req)
			for k, want := range tc.wantReply {
				assert.Equal(t, want, replyHeader(t, res, k))
			}
			assert.Positive(t, p.PollOneoffCalls())
			assert.NoError(t, p.VM(0).Failed())
		})
	}
}

func TestPropertiesUseEnvoysPathsAndEncodings(t *testing.T) {
	clock := envoyhost.NewClock(time.Unix(1_700_000_000, 5).UTC())
	p := newPlugin(t, "guest", envoyhost.Config{
		VMID: "vm", PluginName: "ns.rl", RootID: "rl", Clock: clock,
		Node:       envoyhost.Node{ID: "sidecar~10.0.0.2~pod.ns~ns.svc.cluster.local", Metadata: map[string]string{"NAMESPACE": "ns"}},
		Properties: map[string][]byte{envoyhost.Path("wasm", "custom"): []byte("plugin-wide")},
	})
	info := envoyhost.StreamInfo{
		SourceAddress: "10.1.2.3:5000", RouteName: "r1", ClusterName: "outbound|80||svc",
		Properties: map[string][]byte{envoyhost.Path("request", "size"): []byte("injected")},
	}
	int64le := func(n int64) string {
		return hex.EncodeToString(binary.LittleEndian.AppendUint64(nil, uint64(n)))
	}
	tests := []struct {
		path, wantValue, wantHex, wantStatus string
	}{
		{path: "source/address", wantValue: "10.1.2.3:5000"},
		{path: "source/port", wantHex: int64le(5000)},
		{path: "request/path", wantValue: "/ping?q=1"},
		{path: "request/url_path", wantValue: "/ping"},
		{path: "request/query", wantValue: "q=1"},
		{path: "request/host", wantValue: "example.test"},
		{path: "request/method", wantValue: "GET"},
		{path: "request/scheme", wantValue: "http"},
		{path: "request/id", wantValue: "req-1"},
		{path: "request/protocol", wantValue: "HTTP/1.1"},
		{path: "request/headers/x-multi", wantValue: "a,b"},
		{path: "request/time", wantHex: int64le(clock.Now().UnixNano())},
		{path: "request/size", wantValue: "injected"},
		{path: "xds/route_name", wantValue: "r1"},
		{path: "xds/cluster_name", wantValue: "outbound|80||svc"},
		{path: "xds/node/id", wantValue: "sidecar~10.0.0.2~pod.ns~ns.svc.cluster.local"},
		{path: "xds/node/metadata/NAMESPACE", wantValue: "ns"},
		{path: "plugin_name", wantValue: "ns.rl"},
		{path: "plugin_root_id", wantValue: "rl"},
		{path: "plugin_vm_id", wantValue: "vm"},
		{path: "wasm/custom", wantValue: "plugin-wide"},
		{path: "route_name", wantStatus: "1"},
		{path: "request/nope", wantStatus: "1"},
	}
	for _, tc := range tests {
		t.Run("resolves "+tc.path, func(t *testing.T) {
			h := op("prop", "x-path", tc.path, "x-request-id", "req-1", "x-multi", "a", "x-multi", "b")
			res, err := p.VM(0).RoundTrip(context.Background(), &envoyhost.Request{Headers: h, Info: info}, ok200)
			require.NoError(t, err)
			want := tc.wantStatus
			if want == "" {
				want = "0"
			}
			require.Equal(t, want, replyHeader(t, res, "x-status"))
			if tc.wantHex != "" {
				assert.Equal(t, tc.wantHex, replyHeader(t, res, "x-hex"))
			} else {
				assert.Equal(t, tc.wantValue, replyHeader(t, res, "x-value"))
			}
		})
	}
	t.Run("reads back a property it set", func(t *testing.T) {
		res := roundTrip(t, p.VM(0), op("setprop", "x-path", "my_key", "x-value", "v"))
		assert.Equal(t, "0", replyHeader(t, res, "x-status"))
		assert.Equal(t, "v", replyHeader(t, res, "x-value"))
	})
	t.Run("shows a property the stream set as Envoy's filter state wasm.<name>", func(t *testing.T) {
		res := roundTrip(t, p.VM(0), op("setprop", "x-path", "meshlimit.rule", "x-value", "login"))
		assert.Equal(t, map[string]string{"wasm.meshlimit.rule": "login"}, res.FilterState)
		other := roundTrip(t, p.VM(0), op("prop", "x-path", "meshlimit.rule"))
		assert.Nil(t, other.FilterState, "filter state belongs to the stream that set it")
		assert.Equal(t, "1", replyHeader(t, other, "x-status"), "another stream reads NotFound")
	})
}

func TestPausedStreamsHoldTheirBodyAndRespectDeadlines(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{})
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	defer s.Close()
	act, err := s.SendRequestHeaders(op("pause"), false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionPause, act)
	act, err = s.SendRequestBody([]byte("hello"), true)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionPause, act)
	assert.Zero(t, p.Process().Metrics()["body_bytes"].Value, "no body callback while paused")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	act, err = s.Wait(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, envoyhost.ActionPause, act)
	_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", "200"}}, true)
	assert.ErrorIs(t, err, envoyhost.ErrStreamOrder, "no response before the request was forwarded")
}

func TestStreamLifecycleCallsLogDoneDelete(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{})
	s := p.VM(0).NewStream(envoyhost.StreamInfo{})
	act, err := s.SendRequestHeaders(op(""), false)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act)
	act, err = s.SendRequestBody([]byte("abc"), true)
	require.NoError(t, err)
	assert.Equal(t, envoyhost.ActionContinue, act)
	assert.Equal(t, []byte("abc"), s.UpstreamBody())
	_, err = s.SendResponseHeaders(envoyhost.Headers{{":status", "204"}}, true)
	require.NoError(t, err)
	got, _ := s.DownstreamHeaders().Get("x-guest-response")
	assert.Equal(t, strconv.Itoa(int(s.ID())), got)
	m := p.Process().Metrics()
	assert.Zero(t, m["deletes"].Value)
	require.NoError(t, s.Close())
	m = p.Process().Metrics()
	assert.Equal(t, int64(3), m["body_bytes"].Value)
	for _, name := range []string{"logs", "dones", "deletes"} {
		assert.Equal(t, int64(1), m[name].Value, name)
	}
	_, err = s.SendRequestBody(nil, true)
	assert.ErrorIs(t, err, envoyhost.ErrStreamOrder)
}

func TestLogsAreCapturedWithLevelAndVM(t *testing.T) {
	p := newPlugin(t, "guest", envoyhost.Config{Workers: 1})
	roundTrip(t, p.VM(1), op("log", "x-msg", "hello from vm 1"))
	var found bool
	for _, e := range p.Logs() {
		if strings.Contains(e.Message, "hello from vm 1") {
			found = true
			assert.Equal(t, envoyhost.LogEntry{VM: 1, Level: envoyhost.LogError, Message: "hello from vm 1"}, e)
		}
	}
	assert.True(t, found)
}

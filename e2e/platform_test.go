package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// envoy427Imports is every function an Envoy ≥ 1.33 (proxy-wasm-cpp-host with PR #427, without #533)
// offers a module of ABI 0.2.0: its 18 WASI functions and the env.proxy_* functions
// (docs/envoy-host.md §1.1, §1.2).
var envoy427Imports = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Fields(`args_get args_sizes_get clock_time_get environ_get environ_sizes_get fd_close
		fd_fdstat_get fd_fdstat_set_flags fd_prestat_dir_name fd_prestat_get fd_read fd_seek fd_write path_open
		poll_oneoff proc_exit random_get sched_yield`) {
		m["wasi_snapshot_preview1."+f] = true
	}
	for _, f := range strings.Fields(`log get_status set_property get_property send_local_response get_shared_data
		set_shared_data register_shared_queue resolve_shared_queue dequeue_shared_queue enqueue_shared_queue
		get_header_map_value add_header_map_value replace_header_map_value remove_header_map_value
		get_header_map_pairs set_header_map_pairs get_header_map_size get_buffer_status get_buffer_bytes
		set_buffer_bytes http_call grpc_call grpc_stream grpc_close grpc_cancel grpc_send
		set_tick_period_milliseconds get_current_time_nanoseconds define_metric increment_metric record_metric
		get_metric set_effective_context done call_foreign_function continue_stream close_stream`) {
		m["env.proxy_"+f] = true
	}
	return m
}()

func TestTheCompiledModulesImportOnlyWhatEnvoy133Provides(t *testing.T) {
	for _, name := range []string{"meshlimit", "passthrough"} {
		t.Run(name, func(t *testing.T) {
			imports, err := envoyhost.ModuleImports(context.Background(), module(t, name))
			require.NoError(t, err)
			require.NotEmpty(t, imports)
			for _, imp := range imports {
				assert.True(t, envoy427Imports[imp], "%s imports %s, which Envoy 1.33 does not provide", name, imp)
			}
			t.Logf("%d imports: %s", len(imports), strings.Join(imports, " "))
		})
	}
}

func TestThePassThroughModuleRunsOnFourWorkerVMsAtOnce(t *testing.T) {
	p := load(t, module(t, "passthrough"), `{"anything": true}`, 4)
	require.Len(t, p.VMs(), 5, "four workers and the main thread")
	var wg sync.WaitGroup
	for _, vm := range p.VMs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				res := roundTrip(t, vm, get("example.com", "/", "10.0.0.1"))
				assert.Nil(t, res.LocalReply)
				assert.NotNil(t, res.Upstream, "the request was forwarded")
			}
		}()
	}
	wg.Wait()
	for _, vm := range p.VMs() {
		assert.NoError(t, vm.Failed())
	}
	assert.Zero(t, p.PollOneoffCalls(), "the Go runtime must never wait in poll_oneoff: Envoy's #427 stub aborts it")
	assert.True(t, logsContain(p, envoyhost.LogInfo, "passthrough: started with 18 bytes of configuration"))
}

func TestMeshlimitStartsOnEveryVMAndLogsItsSummary(t *testing.T) {
	p := load(t, module(t, "meshlimit"), `{"rules":[{"name":"per-ip","key":["client_ip"],"limits":[{"rate":"1000/s"}]}]}`, 4)
	var wg sync.WaitGroup
	for _, vm := range p.VMs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				assert.Equal(t, 200, status(roundTrip(t, vm, get("example.com", "/", "10.0.0.1"))))
			}
		}()
	}
	wg.Wait()
	for _, vm := range p.VMs() {
		assert.NoError(t, vm.Failed())
	}
	assert.Zero(t, p.PollOneoffCalls())
	assert.True(t, logsContain(p, envoyhost.LogInfo, "meshlimit: 1 rule"), "the one-line summary")
	if t.Failed() {
		dumpLogs(t, p)
	}
}

func TestABadConfigurationFailsPluginStartWithTheFieldInTheLog(t *testing.T) {
	cfg := envoyhost.Config{
		VMID: "meshlimit", PluginName: "default.meshlimit", RootID: "meshlimit", Workers: 2,
		PluginConfig: []byte(`{"rules":[{"name":"r","limits":[{"rate":"10/fortnight"}]}]}`),
	}
	var critical []string
	cfg.OnLog = func(e envoyhost.LogEntry) {
		if e.Level == envoyhost.LogCritical {
			critical = append(critical, e.Message)
		}
	}
	p, err := envoyhost.NewPlugin(context.Background(), module(t, "meshlimit"), cfg)
	if p != nil {
		_ = p.Close()
	}
	require.Error(t, err, "Envoy refuses the filter when on_configure fails")
	assert.Contains(t, err.Error(), "Failed to configure base Wasm plugin")
	require.Len(t, critical, 1, "the canary logs why, once")
	assert.Contains(t, critical[0], `config: rules[0].limits[0].rate: invalid rate "10/fortnight"`)
}

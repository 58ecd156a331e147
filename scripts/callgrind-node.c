/* callgrind-node: a Node addon (N-API) with two functions, zeroStats() and dumpStats(), that send
 * callgrind's client requests CALLGRIND_ZERO_STATS and CALLGRIND_DUMP_STATS (valgrind/callgrind.h),
 * so that e2e/v8host/instr.js counts the instructions of exactly its measured loop, in one process
 * for every case. Outside valgrind both do nothing. Built by `make bench-instructions` into
 * build/callgrind.node (needs gcc, Node's headers and valgrind's). */
#include <node_api.h>
#include <valgrind/callgrind.h>

static napi_value zero_stats(napi_env env, napi_callback_info info) {
  (void)info;
  CALLGRIND_ZERO_STATS;
  return NULL;
}

static napi_value dump_stats(napi_env env, napi_callback_info info) {
  (void)info;
  CALLGRIND_DUMP_STATS;
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_value fn;
  if (napi_create_function(env, "zeroStats", NAPI_AUTO_LENGTH, zero_stats, NULL, &fn) != napi_ok ||
      napi_set_named_property(env, exports, "zeroStats", fn) != napi_ok ||
      napi_create_function(env, "dumpStats", NAPI_AUTO_LENGTH, dump_stats, NULL, &fn) != napi_ok ||
      napi_set_named_property(env, exports, "dumpStats", fn) != napi_ok) {
    return NULL;
  }
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)

/* callgrind-node: a Node addon (N-API) whose start() and stop() send callgrind's client requests
 * (valgrind/callgrind.h) around e2e/v8host/instr.js's loops, in one process for every case.
 * start() zeroes the counters (CALLGRIND_ZERO_STATS) and turns collection on for the calling
 * thread only (CALLGRIND_TOGGLE_COLLECT); stop() turns it off again and writes a dump
 * (CALLGRIND_DUMP_STATS). Run under valgrind --tool=callgrind --collect-atstart=no
 * --separate-threads=yes, the main thread's dump then holds the instructions of the loop on that
 * thread and nothing else; every other thread's stays at zero. onValgrind() says whether the
 * process runs under valgrind; outside it start(), stop() and instrument() do nothing.
 * instrument(on) starts or stops callgrind's instrumentation (CALLGRIND_START_INSTRUMENTATION /
 * CALLGRIND_STOP_INSTRUMENTATION): run with --instr-atstart=no, the process runs at valgrind's
 * uninstrumented speed (no cache or call simulation, no counts) until instrument(true), which is
 * what lets V8 compile a 6 MB module and warm it up in minutes under valgrind; uninstrumented code
 * counts nothing whatever the collection state. Each switch discards valgrind's translations (its
 * own cost, never the guest's). Built by
 * `make bench-instructions` into build/callgrind.node (needs gcc, Node's headers and valgrind's). */
#include <node_api.h>
#include <valgrind/callgrind.h>

static napi_value start(napi_env env, napi_callback_info info) {
  (void)env;
  (void)info;
  CALLGRIND_ZERO_STATS;
  CALLGRIND_TOGGLE_COLLECT;
  return NULL;
}

static napi_value stop(napi_env env, napi_callback_info info) {
  (void)env;
  (void)info;
  CALLGRIND_TOGGLE_COLLECT;
  CALLGRIND_DUMP_STATS;
  return NULL;
}

static napi_value instrument(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value arg;
  bool on = false;
  if (napi_get_cb_info(env, info, &argc, &arg, NULL, NULL) != napi_ok || argc != 1 ||
      napi_get_value_bool(env, arg, &on) != napi_ok) {
    napi_throw_type_error(env, NULL, "instrument(on): on must be a boolean");
    return NULL;
  }
  if (on) {
    CALLGRIND_START_INSTRUMENTATION;
  } else {
    CALLGRIND_STOP_INSTRUMENTATION;
  }
  return NULL;
}

static napi_value on_valgrind(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value v;
  if (napi_get_boolean(env, RUNNING_ON_VALGRIND != 0, &v) != napi_ok) {
    return NULL;
  }
  return v;
}

static int export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  return napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn) == napi_ok &&
         napi_set_named_property(env, exports, name, fn) == napi_ok;
}

static napi_value init(napi_env env, napi_value exports) {
  if (!export_fn(env, exports, "start", start) || !export_fn(env, exports, "stop", stop) ||
      !export_fn(env, exports, "instrument", instrument) ||
      !export_fn(env, exports, "onValgrind", on_valgrind)) {
    return NULL;
  }
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)

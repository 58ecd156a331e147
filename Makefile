# meshlimit: the one entry point. `make help` lists the targets.

GO        ?= go
BUILD     := build
SDK       := github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal
# The SDK targets TinyGo; with the standard toolchain, -tags tinygo selects its bodyless host-call
# declarations, -complete=false lets that package compile, and package abi supplies the bodies.
WASMFLAGS := -buildmode=c-shared -tags tinygo -gcflags=$(SDK)=-complete=false -trimpath
WASMENV   := GOOS=wasip1 GOARCH=wasm
FUZZTIME  ?= 20s
BENCHTIME ?= 1s
BENCHCOUNT ?= 6

IMAGE_NAME ?= meshlimit/meshlimit
IMAGE_TAG  ?= 0.1.0
SERVICE_IMAGE_NAME ?= meshlimit/meshlimit-service
ARCH       ?= amd64
REGISTRY   ?=

.PHONY: help wasm need-redis test test-unit test-e2e test-e2e-race test-busy test-redis test-wasip1 test-deploy image service-image push check-config demo bench accuracy fuzz plots check fmt vet tidy clean

help: ## list every target (one without a description is listed as such)
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
	@grep -E '^[a-z0-9-]+:' $(MAKEFILE_LIST) | grep -v '## ' | awk -F: '{printf "  %-12s (no description)\n", $$1}'

wasm: $(BUILD)/meshlimit.wasm $(BUILD)/passthrough.wasm $(BUILD)/hostfloor.wasm ## build the filter (build/meshlimit.wasm), the pass-through floor and the host-call floor

# Always rebuilt: the go command's cache makes an unchanged build instant.
.PHONY: $(BUILD)/meshlimit.wasm $(BUILD)/passthrough.wasm $(BUILD)/hostfloor.wasm
$(BUILD)/meshlimit.wasm:
	@mkdir -p $(BUILD)
	$(WASMENV) $(GO) build $(WASMFLAGS) -o $@ ./cmd/filter

$(BUILD)/passthrough.wasm:
	@mkdir -p $(BUILD)
	$(WASMENV) $(GO) build $(WASMFLAGS) -o $@ ./cmd/passthrough

# The pass-through plus the host calls of the filter's allowed request (docs/performance.md).
$(BUILD)/hostfloor.wasm:
	@mkdir -p $(BUILD)
	$(WASMENV) $(GO) build $(WASMFLAGS) -o $@ ./cmd/hostfloor

# make test runs its stages one after another (scripts/stages), those joined by + side by side (e2e
# keeps one core busy, wasip1 and deploy take the other): each has its own time bound, every stage
# runs even when one before it failed, and the closing table says what each took. gotestsum (a tool
# in go.mod) prints a line per package as it ends, and one per e2e test.
TEST_STAGES  := test-unit test-e2e+test-wasip1+test-deploy test-e2e-race
GOTESTSUM    := $(CURDIR)/$(BUILD)/bin/gotestsum
TESTOUT      := $(CURDIR)/$(BUILD)/test
UNIT_TIMEOUT ?= 15m
E2E_TIMEOUT  ?= 30m
TESTFLAGS    ?= -count=1
# e2e runs without the race detector: under it wazero's compiler (instrumented Go) makes the package
# three times slower, and what it would race on, the host and the service, runs with -race in
# test-unit (internal/envoyhost, service/..., cmd/demo). test-e2e-race runs the e2e tests that drive
# the compiled module from several goroutines at once with -race.
E2EFLAGS     ?=
E2E_RACE_RUN := ^(TestChurningStreamsOnEightWorkersNeverExceedTheLimitInFlight|TestEightWorkersAdmitExactlyTheConcurrencyLimitOf400HeldStreams|TestEightWorkerVMsOnOneKeyAdmitExactlyTheCapacity|TestAGlobalLimitCountsAcrossWorkersAndAcrossProxies|TestTwoServiceReplicasOnOneRedisShareTheCount|TestTwoProxiesOnTwoServiceReplicasHoldExactlyTheGlobalConcurrencyLimit|TestRealHTTPThroughTheFilterGets200sThen429s|TestThePassThroughModuleRunsOnFourWorkerVMsAtOnce)$$

# The test binaries of every package share the wasm they compile (internal/envoyhost's compilation
# cache): one compilation of build/meshlimit.wasm serves the whole run. Entries older than a day go.
WAZERO_CACHE := $(CURDIR)/$(BUILD)/wazero-cache
test test-unit test-e2e test-e2e-race test-redis test-busy: export ENVOYHOST_CACHE_DIR = $(WAZERO_CACHE)

test: need-redis need-node wasm $(GOTESTSUM) ## the README's test command: install Redis, node and promtool if missing, build the wasm, run the stages test-unit, test-e2e (test-wasip1 and test-deploy beside it) and test-e2e-race, then a table of their results and seconds
	@sh scripts/need promtool:prometheus
	@find $(WAZERO_CACHE) -type f -mmin +1440 -delete 2>/dev/null || true
	@sh scripts/stages $(TEST_STAGES)

test-unit: need-redis $(GOTESTSUM) ## every package but e2e, with -race
	@mkdir -p $(TESTOUT)
	$(GOTESTSUM) --format pkgname-and-test-fails --format-hide-empty-pkg --jsonfile $(TESTOUT)/unit.json -- \
	  -race $(TESTFLAGS) -timeout=$(UNIT_TIMEOUT) $$($(GO) list ./... | grep -v '/e2e$$')

test-e2e: need-redis need-node wasm $(GOTESTSUM) ## the compiled module on internal/envoyhost and V8 (e2e/), with the real service and Redis
	@mkdir -p $(TESTOUT)
	$(GOTESTSUM) --format testname --jsonfile $(TESTOUT)/e2e.json -- $(E2EFLAGS) $(TESTFLAGS) -timeout=$(E2E_TIMEOUT) ./e2e/

# The packages whose tests start redis-server, but e2e (the Redis half of the lead's proof run).
REDIS_PKGS := ./internal/redistest/ ./service/... ./cmd/meshlimit-admin/ ./cmd/meshlimit-service/

test-redis: need-redis wasm $(GOTESTSUM) ## the packages whose tests start redis-server (but e2e), with -race; TESTFLAGS=-count=2 to repeat
	@mkdir -p $(TESTOUT)
	$(GOTESTSUM) --format pkgname-and-test-fails --jsonfile $(TESTOUT)/redis.json -- -race $(TESTFLAGS) -timeout=$(UNIT_TIMEOUT) $(REDIS_PKGS)

test-busy: ## the proof run: 3 × make test, then test-redis with -count=2, beside stress-ng --cpu 4; seconds per stage (scripts/busy)
	@sh scripts/need stress-ng:stress-ng
	@sh scripts/busy

test-e2e-race: need-redis wasm $(GOTESTSUM) ## the e2e tests that drive the module from many goroutines at once, with -race
	@mkdir -p $(TESTOUT)
	$(GOTESTSUM) --format testname --jsonfile $(TESTOUT)/e2e-race.json -- -race $(TESTFLAGS) -timeout=$(UNIT_TIMEOUT) \
	  -run '$(E2E_RACE_RUN)' ./e2e/

$(GOTESTSUM): go.mod
	@mkdir -p $(BUILD)/bin
	$(GO) build -o $@ gotest.tools/gotestsum

# The service and e2e tests start real redis-server processes on loopback ports, and the Sentinel
# tests redis-sentinel ones. As root on Debian/Ubuntu this installs redis-server, redis-tools and
# redis-sentinel; otherwise it stops with the command to run.
need-redis: ## install redis-server, redis-cli and redis-sentinel if missing (as root), or print the one command to run
	@sh scripts/need redis-server:redis-server redis-cli:redis-tools redis-sentinel:redis-sentinel

# envoy/ is its own module, so that go-control-plane, istio.io/api and k8s.io/api stay out of the
# filter's dependencies. The first run compiles them (about 3 minutes on 2 cores).
test-deploy: $(GOTESTSUM) ## validate envoy/ and envoy/istio/ against Envoy's, Istio's and Kubernetes' schemas
	@mkdir -p $(TESTOUT)
	cd envoy && $(GOTESTSUM) --format pkgname-and-test-fails --format-hide-empty-pkg --jsonfile $(TESTOUT)/deploy.json -- \
	  $(TESTFLAGS) -timeout=$(UNIT_TIMEOUT) ./...

image: wasm ## the OCI image Istio pulls: build/image/oci (layout) and build/image/meshlimit.tar (archive)
	cd envoy && $(GO) run ./cmd/wasmimage -wasm $(CURDIR)/$(BUILD)/meshlimit.wasm \
	  -layout $(CURDIR)/$(BUILD)/image/oci -tar $(CURDIR)/$(BUILD)/image/meshlimit.tar \
	  -name $(IMAGE_NAME) -tag $(IMAGE_TAG)

# The decision service as a static Linux binary on an empty root, packed without a container engine.
service-image: ## the service's OCI image (static linux/ARCH binary, user 65532, no base image): build/image/service-oci and build/image/meshlimit-service.tar
	@mkdir -p $(BUILD)/linux-$(ARCH)
	CGO_ENABLED=0 GOOS=linux GOARCH=$(ARCH) $(GO) build -trimpath -ldflags=-s -o $(BUILD)/linux-$(ARCH)/meshlimit-service ./cmd/meshlimit-service
	cd envoy && $(GO) run ./cmd/serviceimage -binary $(CURDIR)/$(BUILD)/linux-$(ARCH)/meshlimit-service -arch $(ARCH) \
	  -layout $(CURDIR)/$(BUILD)/image/service-oci -tar $(CURDIR)/$(BUILD)/image/meshlimit-service.tar -tag $(IMAGE_TAG)

push: need-registry image service-image ## push both images to REGISTRY (make push REGISTRY=registry.example.com IMAGE_TAG=0.1.0), credentials from the Docker configuration
	cd envoy && $(GO) run ./cmd/imagepush -layout $(CURDIR)/$(BUILD)/image/oci -tag $(IMAGE_TAG) -to $(REGISTRY)/$(IMAGE_NAME):$(IMAGE_TAG)
	cd envoy && $(GO) run ./cmd/imagepush -layout $(CURDIR)/$(BUILD)/image/service-oci -tag $(IMAGE_TAG) -to $(REGISTRY)/$(SERVICE_IMAGE_NAME):$(IMAGE_TAG)

.PHONY: need-registry
need-registry: ## (for push) stop with the usage unless REGISTRY is set
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=registry.example.com [IMAGE_TAG=$(IMAGE_TAG)]"; exit 2; }

check-config: ## check a plugin configuration (CONFIG=file: JSON or YAML, a WasmPlugin, an Envoy configuration) and summarize its rules
	@test -n "$(CONFIG)" || { echo "usage: make check-config CONFIG=file (or CONFIG="file1 file2")"; exit 2; }
	$(GO) run ./cmd/meshlimit-check $(CONFIG)

# The pure packages also run as wasm, where the filter runs them, on wazero through the Go
# distribution's wasip1 exec script.
test-wasip1: $(BUILD)/bin/wazero $(GOTESTSUM) ## run the pure packages' tests (algorithms, shed, messages) compiled to wasip1
	@mkdir -p $(TESTOUT)
	PATH="$(CURDIR)/$(BUILD)/bin:$$PATH" GOWASIRUNTIME=wazero $(WASMENV) $(GOTESTSUM) --format pkgname-and-test-fails \
	  --jsonfile $(TESTOUT)/wasip1.json -- $(TESTFLAGS) -timeout=$(UNIT_TIMEOUT) \
	  -exec="$$($(GO) env GOROOT)/lib/wasm/go_wasip1_wasm_exec" ./algorithms/ ./shed/ ./messages/

$(BUILD)/bin/wazero: go.mod
	@mkdir -p $(BUILD)/bin
	$(GO) build -o $@ github.com/tetratelabs/wazero/cmd/wazero

demo: wasm ## the main job on an embedded default: a burst through the filter on internal/envoyhost
	$(GO) run ./cmd/demo

bench: wasm ## benchmarks (medians over BENCHCOUNT runs; feed the output to benchstat), then bench-instructions
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=$(BENCHCOUNT) ./... | tee $(BUILD)/bench.txt
	node e2e/v8host/table.js $(BUILD)/bench.txt
	@$(MAKE) --no-print-directory bench-instructions

# The V8 host (e2e/v8host) runs the module on Node's V8, the engine Envoy uses, with Envoy's V8 flags.
.PHONY: need-node test-v8 bench-lifecycle bench-buffering coldstart-v8 coldbytes-v8 bench-instructions attribute-instructions
V8FLAGS := --no-liftoff --wasm-max-mem-pages=16384

# The shared scenarios run the module on V8 (the engine Envoy and Istio use) under node.
need-node: ## install node if missing (as root), or print the one command to run
	@sh scripts/need node:nodejs

test-v8: need-node wasm ## the shared scenarios (e2e/scenarios) on V8 and on wazero; any divergence fails
	$(GO) test -count=1 -run='^TestTheSharedScenariosRunAlikeOnWazeroAndV8$$' ./e2e/

bench-lifecycle: need-node wasm ## the request lifecycle on wazero and on V8, side by side (CPU time, alternated); AGAINST=other.wasm adds its cases (all but the floor) on wazero as base-*
	$(GO) test -run='^$$' -bench='^BenchmarkLifecycleAlternated$$' -count=$(BENCHCOUNT) ./e2e/ $(if $(AGAINST),-args -lifecycle.against=$(abspath $(AGAINST))) | tee $(BUILD)/bench-lifecycle.txt
	node e2e/v8host/table.js $(BUILD)/bench-lifecycle.txt

bench-buffering: wasm ## memory bound of buffering: linear memory per open stream holding max_body (JSON, SSE, request) vs a rule reading no body
	$(GO) test -run='^$$' -bench='^BenchmarkBufferingMemory$$' -benchtime=3x -count=3 ./e2e/ | tee $(BUILD)/bench-buffering.txt
	@awk -v bench='^BenchmarkBufferingMemory' -v units='bytes' -f scripts/bench-medians.awk $(BUILD)/bench-buffering.txt

# Instructions per request on both engines by callgrind (scripts/bench-instructions.js, method in
# docs/performance.md): the same on a busy machine. AGAINST=other.wasm adds its figures as "before".
bench-instructions: need-node wasm $(BUILD)/callgrind.node ## instructions per request (callgrind) on wazero and V8: the lifecycle, rules and limits tables in markdown; AGAINST=build/meshlimit-before.wasm for before/after in one run
	@sh scripts/need valgrind:valgrind
	$(GO) test -c -o $(BUILD)/e2e.test ./e2e/
	node scripts/bench-instructions.js $(if $(AGAINST),--against $(AGAINST)) $(INSTRFLAGS) | tee $(BUILD)/bench-instructions.md

# Where a warm request's instructions go on wazero (scripts/attribute-instructions.js): callgrind
# with --dump-instr=yes on an e2e binary built with -tags perfmap, whose wazero maps its compiled
# functions; CASE is a case of scripts/bench-instructions.js (default allowed), against the floor.
attribute-instructions: wasm ## where CASE's (default allowed) instructions per request go on wazero: by guest package, guest function and host, against the pass-through floor
	@sh scripts/need valgrind:valgrind
	$(GO) test -c -tags perfmap -o $(BUILD)/e2e-perfmap.test ./e2e/
	node scripts/attribute-instructions.js --run $(or $(CASE),allowed) | tee $(BUILD)/attribute-instructions.md

# The addon through which e2e/v8host/instr.js sends callgrind's client requests.
$(BUILD)/callgrind.node: scripts/callgrind-node.c
	@mkdir -p $(BUILD)
	@sh scripts/need valgrind:valgrind gcc:gcc
	gcc -O2 -shared -fPIC -DNODE_GYP_MODULE_NAME=callgrind -I/usr/include/node -o $@.tmp scripts/callgrind-node.c
	@mv $@.tmp $@ # a new file: a run under valgrind that loaded the old one keeps it intact

COLDRUNS ?= 5
coldstart-v8: need-node wasm ## Envoy's start sequence on V8, phase by phase: wall and CPU medians of COLDRUNS fresh node processes, alternated with the pass-through
	node $(V8FLAGS) e2e/v8host/main.js coldruns $(COLDRUNS) $(BUILD)/passthrough.wasm $(BUILD)/meshlimit.wasm

coldbytes-v8: need-node wasm ## what TurboFan compiles in each phase of the V8 cold start (function bodies by package; load-independent), pass-through and meshlimit
	node $(V8FLAGS) e2e/v8host/main.js coldbytes $(BUILD)/passthrough.wasm $(BUILD)/meshlimit.wasm

fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg; \
	  done; done

accuracy: ## sliding window counter and fixed window against the exact sliding log on 10M requests
	ACCURACY_REQUESTS=10000000 $(GO) test -count=1 -run='^TestAccuracy$$' -v ./algorithms/

plots: ## draw docs/algorithms.png (each algorithm over time), docs/shedding.png (shedding, adaptive capacity) and docs/observability.png (the dashboard's panels)
	$(GO) run ./cmd/mlplot -o docs/algorithms.png
	$(GO) run ./cmd/mlplot -shedding -o docs/shedding.png
	$(GO) run ./cmd/mlplot -dashboard deploy/observability/grafana/meshlimit.json -o docs/observability.png

fmt: ## format the tree
	gofmt -w $$(git ls-files '*.go')

vet: ## go vet, natively, for the wasm build, and in envoy/
	$(GO) vet ./...
	cd envoy && $(GO) vet ./...
	$(WASMENV) $(GO) vet -tags tinygo -gcflags=$(SDK)=-complete=false ./abi/ ./cmd/filter/ ./cmd/passthrough/ ./cmd/hostfloor/ ./filter/

# -go pins the floor: tidy fails instead of raising it when a dependency wants a newer Go.
tidy: ## go mod tidy in both modules, keeping the go directive at 1.26.0
	$(GO) mod tidy -go=1.26.0
	cd envoy && $(GO) mod tidy -go=1.26.0

# staticcheck and deadcode are installed at a pinned version
# into build/bin instead of as tools in go.mod (which would raise the go directive). staticcheck runs natively only: with the filter's
# wasip1 flags it cannot type-check the SDK's bodyless host calls.
STATICCHECK_VERSION := v0.8.2
$(BUILD)/bin/staticcheck: Makefile
	@mkdir -p $(BUILD)/bin
	GOBIN=$(CURDIR)/$(BUILD)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: staticcheck
staticcheck: $(BUILD)/bin/staticcheck ## staticcheck (STATICCHECK_VERSION, installed into build/bin) on every native package
	$(BUILD)/bin/staticcheck ./...

DEADCODE_VERSION := v0.52.0
$(BUILD)/bin/deadcode: Makefile
	@mkdir -p $(BUILD)/bin
	GOBIN=$(CURDIR)/$(BUILD)/bin $(GO) install golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION)

.PHONY: deadcode
deadcode: $(BUILD)/bin/deadcode ## no function outside tests is unreachable from every program, native and wasip1 (scripts/deadcode)
	DEADCODE=$(CURDIR)/$(BUILD)/bin/deadcode sh scripts/deadcode

check: vet staticcheck deadcode ## gofmt, vet, staticcheck, deadcode, and go mod tidy leave the tree unchanged
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	@cp go.mod $(BUILD)/go.mod.bak 2>/dev/null || { mkdir -p $(BUILD); cp go.mod $(BUILD)/go.mod.bak; }
	@cp go.sum $(BUILD)/go.sum.bak
	@cp envoy/go.mod $(BUILD)/envoy.go.mod.bak && cp envoy/go.sum $(BUILD)/envoy.go.sum.bak
	$(GO) mod tidy -go=1.26.0
	cd envoy && $(GO) mod tidy -go=1.26.0
	@cmp -s go.mod $(BUILD)/go.mod.bak && cmp -s go.sum $(BUILD)/go.sum.bak || { echo "go mod tidy changed go.mod/go.sum"; git --no-pager diff -- go.mod go.sum; exit 1; }
	@cmp -s envoy/go.mod $(BUILD)/envoy.go.mod.bak && cmp -s envoy/go.sum $(BUILD)/envoy.go.sum.bak || { echo "go mod tidy changed envoy/go.mod/go.sum"; git --no-pager diff -- envoy/go.mod envoy/go.sum; exit 1; }

clean: ## remove build/ (the wasm modules, images, tools and benchmark output)
	rm -rf $(BUILD)

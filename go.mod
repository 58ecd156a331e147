module github.com/meshlimit/meshlimit

go 1.24.0

require (
	github.com/redis/rueidis v1.0.69
	github.com/stretchr/testify v1.12.1
	github.com/tetratelabs/proxy-wasm-go-sdk v0.24.0
	github.com/tetratelabs/wazero v1.11.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.38.0 // indirect
)

tool github.com/tetratelabs/wazero/cmd/wazero

module wasm-operator.dev/sdk-go

go 1.24

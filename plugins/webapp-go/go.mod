module wasm-operator.dev/plugins/webapp-go

go 1.24

require wasm-operator.dev/sdk-go v0.0.0

replace wasm-operator.dev/sdk-go => ../../sdk-go

# Generator versions are pinned here; `make proto` installs them into .bin/ and regenerates.
BUF_VERSION              := v1.75.0
PROTOC_GEN_GO_VERSION    := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GRPC_GATEWAY_VERSION     := v2.32.0

BIN := $(CURDIR)/.bin

.PHONY: proto proto-tools proto-lint test build

build:
	go build -o $(BIN)/nacre ./cmd/nacre

test:
	go test -count=1 -timeout 20m ./...

proto-tools:
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(BIN) go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
	GOBIN=$(BIN) go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)

proto-lint: proto-tools
	$(BIN)/buf lint

proto: proto-tools
	$(BIN)/buf lint
	rm -f proto/nacre/*/v1/*.pb.go proto/nacre/*/v1/*.pb.gw.go gateway/openapi/*.json
	$(BIN)/buf generate

#!/usr/bin/env bash
# Regenerates the Go code and the OpenAPI document from proto/ with pinned
# generator versions, installed with `go install` into .bin/.
# With --check, fails if the committed generated files differ from a fresh run.
set -euo pipefail
cd "$(dirname "$0")/.."

BUF_VERSION=v1.75.0
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
GRPC_GATEWAY_VERSION=v2.32.0
VTPROTOBUF_VERSION=v0.6.0

export GOBIN="$PWD/.bin"
install() { [ -x "$GOBIN/$1" ] && [ "$(cat "$GOBIN/.$1.version" 2>/dev/null)" = "$3" ] && return 0
  go install "$2@$3" && echo "$3" > "$GOBIN/.$1.version"; }
install buf github.com/bufbuild/buf/cmd/buf "$BUF_VERSION"
install protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
install protoc-gen-go-vtproto github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto "$VTPROTOBUF_VERSION"
install protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway "$GRPC_GATEWAY_VERSION"
install protoc-gen-openapiv2 github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2 "$GRPC_GATEWAY_VERSION"

"$GOBIN/buf" lint
rm -f proto/nacre/*/v1/*.pb.go proto/nacre/*/v1/*.pb.gw.go gateway/openapi/*.json
"$GOBIN/buf" generate

if [ "${1:-}" = "--check" ]; then
  if [ -n "$(git status --porcelain --untracked-files=all -- proto gateway/openapi)" ]; then
    echo "generated code differs from proto/ (run scripts/genproto.sh and commit):" >&2
    git status --short -- proto gateway/openapi >&2
    git diff --stat -- proto gateway/openapi >&2
    exit 1
  fi
  echo "generated code is up to date"
fi

.PHONY: build test proto

build:
	go build -o .bin/nacre ./cmd/nacre

# The whole suite, as the README and .ci/run run it.
test:
	go test -count=1 ./...

# Regenerate Go code and the OpenAPI document with pinned generators.
proto:
	scripts/genproto.sh

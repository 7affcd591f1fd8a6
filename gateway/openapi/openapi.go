// Package openapi holds the OpenAPI document of the Admin REST API, generated
// by `make proto` (protoc-gen-openapiv2) and embedded in the binary.
package openapi

import _ "embed"

// Spec is the OpenAPI (Swagger 2.0) document, JSON.
//
//go:embed nacre.swagger.json
var Spec []byte

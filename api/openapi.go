package api

import _ "embed"

// Spec is openapi.yaml, the OpenAPI 3.0 description of the control API.
// The server serves it at SpecPath.
//
//go:embed openapi.yaml
var Spec []byte

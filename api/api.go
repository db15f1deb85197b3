// Package api holds the API's contract, the OpenAPI 3.1 document
// openapi.yaml, written by hand; the tests check the handler's answers
// against it.
package api

import _ "embed"

// OpenAPI is the text of openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

module github.com/upscalekit/upscale/examples/gorilla

go 1.26.0

require (
	github.com/gorilla/mux v1.8.1
	github.com/upscalekit/upscale v0.0.0
)

require (
	github.com/getkin/kin-openapi v0.153.0 // indirect
	github.com/go-openapi/jsonpointer v0.22.5 // indirect
	github.com/go-openapi/swag/jsonname v0.25.5 // indirect
	github.com/golang-jwt/jwt/v5 v5.3.1 // indirect
	github.com/h2non/bimg v1.1.9 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/patrickmn/go-cache v2.1.0+incompatible // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	go.yaml.in/yaml/v4 v4.0.0 // indirect
	golang.org/x/image v0.48.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.44.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

// The example builds against the library beside it; a copy outside this
// repository requires a released version instead.
replace github.com/upscalekit/upscale => ../..

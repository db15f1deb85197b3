module github.com/upscalekit/upscale

go 1.26.0

require (
	github.com/golang-jwt/jwt/v5 v5.3.1
	github.com/gorilla/mux v1.8.1
	github.com/h2non/bimg v1.1.9
	github.com/patrickmn/go-cache v2.1.0+incompatible
)

require go.uber.org/goleak v1.3.0

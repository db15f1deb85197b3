# make run:  install libvips if missing, start the standalone server with a demo key
# make test: install libvips if missing, check formatting, vet, run every test with -race

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
ARGS ?=

.PHONY: deps run test

# libvips-dev for the default engine (cgo), with gcc and pkg-config to build it.
deps:
	@if ! pkg-config --exists vips 2>/dev/null || ! command -v gcc >/dev/null; then \
		echo "installing libvips-dev, gcc and pkg-config (Debian/Ubuntu packages)"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libvips-dev gcc pkg-config libc6-dev; \
	fi

run: deps
	go run ./examples/standalone $(ARGS)

test: deps
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	go test -race ./...

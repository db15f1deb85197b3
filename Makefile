# make run:  install libvips if missing, start the standalone server with a demo key
# make test: install libvips and PostgreSQL and build versitygw if missing, check formatting, vet, run every test with -race
# make bench: the engine's quality, speed and memory benchmarks (BENCHMARKS.md)
# make fuzz: run each fuzz target FUZZRUNS times (default 1000000); CI runs 100000

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
ARGS ?=
FUZZRUNS ?= 1000000
FUZZ_TARGETS := FuzzDecodeRequest FuzzImageURL FuzzAddressPolicy
# The S3-compatible server the s3store tests start. Building it takes about
# three minutes on two cores, once: the binary is kept outside the clone.
VERSITYGW_VERSION := v1.8.0
VERSITYGW := $(HOME)/.cache/upscale-tools/versitygw-$(VERSITYGW_VERSION)/versitygw

.PHONY: deps test-deps run test bench fuzz

# libvips-dev for the default engine (cgo), with gcc and pkg-config to build
# it; for the tests also PostgreSQL's server binaries and versitygw, from
# which the tests start throwaway servers of their own (the system
# PostgreSQL cluster is not used).
deps:
	@if ! pkg-config --exists vips 2>/dev/null || ! command -v gcc >/dev/null; then \
		echo "installing libvips-dev, gcc and pkg-config (Debian/Ubuntu packages)"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libvips-dev gcc pkg-config libc6-dev; \
	fi

test-deps: deps
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing postgresql (Debian/Ubuntu package) for the sqlstore tests"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; \
	fi
	@if [ ! -x "$(VERSITYGW)" ]; then \
		echo "building versitygw $(VERSITYGW_VERSION) (S3-compatible server) for the s3store tests, about 3 minutes"; \
		CGO_ENABLED=0 GOBIN="$(dir $(VERSITYGW))" go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); \
	fi

run: deps
	go run ./examples/standalone $(ARGS)

test: test-deps
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	UPSCALE_VERSITYGW="$(VERSITYGW)" go test -race ./...

# Quality scores are deterministic, so one run of each is enough. Encoder
# rows run 6 times each and benchstat gives their medians. Each throughput
# run times the floor and the handler back to back and reports their ratio,
# so that both meet the same load; one run's ratio still varies by about
# 15% on a shared 2-core machine, so the rows run 10 times.
BENCHSTAT := go run golang.org/x/perf/cmd/benchstat@v0.0.0-20250813145418-2f7363a06fe1
bench: deps
	go test -run '^$$' -bench 'Quality|Denoise|Anime' -benchtime 1x ./engine/vips
	go test -run '^$$' -bench 'Encoders' -benchtime 1x -count 6 ./engine/vips > bench-encoders.txt
	$(BENCHSTAT) bench-encoders.txt
	go test -run '^$$' -bench 'Throughput' -benchtime 12x -count 10 ./engine/vips > bench-throughput.txt
	$(BENCHSTAT) bench-throughput.txt
	go test -run '^$$' -bench 'LargeScale' -benchtime 3x ./engine/vips

# The seed corpora in testdata/fuzz run with every go test. New inputs found
# here stay in the Go build cache, but a failing one is written to
# testdata/fuzz, to be fixed and committed. The budget is a count, not a
# duration: Go 1.26's coordinator can report its own -fuzztime deadline as a
# failure ("context deadline exceeded", no input written; go.dev/issue/75804,
# fixed in Go 1.27), and a count sets no deadline. Minimising each new input
# is capped at 2s so one slow input cannot stretch the run.
fuzz:
	@for target in $(FUZZ_TARGETS); do \
		echo "fuzzing $$target for $(FUZZRUNS) inputs"; \
		go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZRUNS)x -fuzzminimizetime 2s . || exit 1; \
	done

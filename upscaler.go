package upscale

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ImageType names the kind of content in the image, so the engine can pick a
// suitable enlargement path.
type ImageType string

// The image types of the API.
const (
	Photo ImageType = "photo"
	Anime ImageType = "anime"
)

// Denoise is the strength of noise removal, from DenoiseNone to DenoiseMax.
type Denoise string

// The denoise levels of the API, weakest first.
const (
	DenoiseNone Denoise = "none"
	DenoiseLow  Denoise = "low"
	DenoiseMid  Denoise = "mid"
	DenoiseHigh Denoise = "high"
	DenoiseMax  Denoise = "max"
)

// scales are the enlargement factors the API accepts, smallest first;
// from paidScale up they need paid capability. Validation, charging and
// every message that lists them read them from here.
var scales = [...]int{2, 4, 8, 16}

const paidScale = 8

// Scales returns the enlargement factors the API accepts, smallest first:
// 2, 4, 8 and 16.
func Scales() []int { return slices.Clone(scales[:]) }

// scaleList names the accepted scales for a message, "2, 4, 8 or 16", or
// with paidOnly those that need paid capability, "8 and 16".
func scaleList(paidOnly bool) string {
	list, conj := scales[:], " or "
	if paidOnly {
		list, conj = list[slices.Index(list, paidScale):], " and "
	}
	words := make([]string, len(list))
	for i, s := range list {
		words[i] = strconv.Itoa(s)
	}
	last := len(words) - 1
	return strings.Join(words[:last], ", ") + conj + words[last]
}

// Params says how to enlarge one image. The handler only passes values it
// has validated: Scale is one of Scales(), ImageType and Denoise are one of the
// constants above.
type Params struct {
	Scale     int
	ImageType ImageType
	Denoise   Denoise
	// Format is the result's format; "" writes it in the source's, as a
	// browser shows it (a HEIC or TIFF as JPEG, or PNG with alpha). An
	// Upscaler refuses, with ErrUnsupportedImage, a Format that cannot
	// keep the source: an animation in another format than its own, an
	// image with transparency as JPEG.
	Format Format
	// Quality is the lossy encoder's quality, 1 to 100, for a JPEG,
	// WebP or AVIF result; 0 means the engine's own. A lossless result
	// ignores it.
	Quality int
	// Model is the network the caller asked for by name, one the
	// Upscaler publishes (ModelPublisher), which then makes the learned
	// passes; "" leaves the choice to the Upscaler.
	Model string
}

// A ModelPublisher is an Upscaler whose networks callers may ask for by
// name (the request's model field, Params.Model): engine/onnx with
// networks the operator brings. The handler refuses a model it does not
// publish, or one that cannot make the scale asked, before anything is
// reserved.
type ModelPublisher interface {
	Upscaler
	// PublishedModels lists the networks callers may ask for.
	PublishedModels() []PublishedModel
}

// PublishedModel is a network a ModelPublisher lets callers ask for:
// its name, and the scale one of its passes makes, which the scale asked
// must be a power of.
type PublishedModel struct {
	Name  string
	Scale int
}

// Format is a format a result may be asked in (Params.Format).
type Format string

// The formats a result may be asked in.
const (
	FormatJPEG Format = "jpeg"
	FormatPNG  Format = "png"
	FormatWebP Format = "webp"
	FormatAVIF Format = "avif"
)

var formats = []Format{FormatJPEG, FormatPNG, FormatWebP, FormatAVIF}

// Formats returns the formats a result may be asked in: jpeg, png, webp,
// avif.
func Formats() []Format { return slices.Clone(formats) }

// Image is an encoded image with its pixel size.
type Image struct {
	Data        []byte
	ContentType string // "image/jpeg", "image/png", "image/webp", "image/avif" or "image/gif"
	Width       int
	Height      int
	// Fitted reports that the result is not Scale times the source but the
	// largest the Upscaler makes with the source's aspect ratio: the
	// source enlarged by Scale would exceed its limits. The response's
	// resizedTo gives Width and Height.
	Fitted bool
	// Engine says how the image was enlarged, for the Upscale-Engine
	// response header: comma-separated steps in the order they ran, each
	// a name and parameters, such as
	// "learned;passes=1;network=cunet;runtime=onednn;precision=int8, classical;scale=2".
	// Empty leaves the header out.
	Engine string
}

// Upscaler enlarges images. The default implementation is libvips, in the
// package engine/vips, and engine/onnx runs learned networks; the root
// package depends on neither.
type Upscaler interface {
	// Upscale decodes src, enlarges it by params.Scale and encodes the result
	// in the source's format. The result is exactly Scale times the
	// upright (EXIF-oriented) source in each dimension, or, where that
	// would exceed the Upscaler's largest result, the largest it makes
	// with the source's aspect ratio (Image.Fitted).
	//
	// It returns an error wrapping ErrUnsupportedImage when src is not an
	// image it can decode, ErrImageTooLarge when the source exceeds its
	// pixel limits, or even a result of the source's own size would
	// (checked before pixels are decoded), and
	// ErrUpstream for any other failure. When ctx is done it stops waiting
	// and returns ctx.Err(), so a deadline surfaces as
	// context.DeadlineExceeded; it should stop working on the image too,
	// since the handler has answered and nobody will fetch the result.
	Upscale(ctx context.Context, src []byte, params Params) (Image, error)
}

// ConcurrentUpscaler is an Upscaler that says how many images it enlarges
// at once. The handler then lets that many requests into it and queues
// the rest itself (Config.Capacity.EngineConcurrency); engine/vips and engine/onnx
// implement it.
type ConcurrentUpscaler interface {
	Upscaler
	// Concurrency is how many images Upscale works on at once; more calls
	// wait inside it.
	Concurrency() int
}

// MemoryEstimator is an Upscaler that can tell from a source's header,
// without decoding its pixels, how much memory enlarging it takes. The
// handler grants that much from Config.Capacity.MemoryBudget before the Upscaler
// starts; engine/vips and engine/onnx implement it. An Upscaler that does
// not is charged its source's bytes only.
type MemoryEstimator interface {
	Upscaler
	// EstimateMemory returns an upper bound of the bytes Upscale(ctx, src,
	// params) holds at its peak, source excluded. It fails as Upscale would
	// on a source it refuses (ErrUnsupportedImage, ErrImageTooLarge).
	EstimateMemory(src []byte, params Params) (int64, error)
}

// SizeReader is an Upscaler that can read a source's size in pixels from
// its header, without decoding its pixels: the job form counts the work
// its queue holds by it (JobCounts.QueuedPixels). engine/vips and
// engine/onnx implement it.
type SizeReader interface {
	Upscaler
	// SourcePixels returns how many pixels Upscale reads from src: its
	// width times its height, times its frames for an animation. It fails
	// as Upscale would on a source it refuses.
	SourcePixels(src []byte) (int64, error)
}

// DurationEstimator is an Upscaler that can tell from a source's header
// how long Upscale takes without a deadline, at the pace it has measured
// on this machine: a job's enlargement is given a multiple of that
// (jobHeadroom) rather than its run's whole time, so that a stuck run is
// cut in proportion to its work. engine/onnx implements it; another
// Upscaler's jobs have their run's whole time.
type DurationEstimator interface {
	Upscaler
	// EstimateDuration returns how long Upscale(ctx, src, params) takes
	// doing all its work, and false when it cannot tell yet (its pace not
	// measured). It fails as Upscale would on a source it refuses.
	EstimateDuration(src []byte, params Params) (time.Duration, bool, error)
}

// SourceInspector is an Upscaler that reads a source's header once for
// everything the handler plans its work by: what SourcePixels,
// EstimateMemory and EstimateDuration each read from it alone. The
// handler asks it once at a job's submission and once before each
// enlargement, where it would read the header up to three times (a HEIC's
// with libheif each time). Both engines implement it.
type SourceInspector interface {
	Upscaler
	// InspectSource returns what the other estimators return for src and
	// params, zero where it cannot tell. It fails as Upscale would on a
	// source it refuses.
	InspectSource(src []byte, params Params) (SourceReport, error)
}

// SourceReport is what an Upscaler reads of a source from its header.
// Each zero field means it cannot tell.
type SourceReport struct {
	// Pixels is SizeReader.SourcePixels's.
	Pixels int64
	// Memory is MemoryEstimator.EstimateMemory's.
	Memory int64
	// Duration is DurationEstimator.EstimateDuration's, when known.
	Duration time.Duration
}

// inspectSource reads src's header through u: once, where u is a
// SourceInspector, else through each of the estimators u is, each
// reading it again.
func inspectSource(u Upscaler, src []byte, params Params) (SourceReport, error) {
	if inspector, ok := u.(SourceInspector); ok {
		return inspector.InspectSource(src, params)
	}
	var r SourceReport
	var err error
	if sizer, ok := u.(SizeReader); ok {
		if r.Pixels, err = sizer.SourcePixels(src); err != nil {
			return SourceReport{}, err
		}
	}
	if estimator, ok := u.(MemoryEstimator); ok {
		if r.Memory, err = estimator.EstimateMemory(src, params); err != nil {
			return SourceReport{}, err
		}
	}
	if estimator, ok := u.(DurationEstimator); ok {
		expected, known, err := estimator.EstimateDuration(src, params)
		if err != nil {
			return SourceReport{}, err
		}
		if known {
			r.Duration = expected
		}
	}
	return r, nil
}

// MemoryReleaser is an Upscaler that keeps memory between images (C
// allocators' arenas, buffers it reuses) and can give it back to the
// system. The handler calls ReleaseMemory once it has been idle for
// Config.Capacity.IdleRelease, before it returns the Go heap's free pages,
// so that Go memory the Upscaler drops goes back too; engine/vips and
// engine/onnx implement it.
type MemoryReleaser interface {
	Upscaler
	ReleaseMemory()
}

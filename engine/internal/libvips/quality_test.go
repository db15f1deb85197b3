package libvips

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
)

// score enlarges every image of set degraded by d with r at scale, and
// returns the mean PSNR and SSIM (the protocol of package quality).
func score(tb testing.TB, set []*quality.Image, scale int, d quality.Degradation, r recipe) (meanPSNR, meanSSIM float64) {
	return quality.Score(tb, set, scale, d, func(src []byte) ([]byte, error) {
		return run(context.Background(), src, pngFormat, geometry{scale: scale}, r, bimg.ImageMetadata{})
	})
}

func TestAnimeBeatsPhotoOnCelImages(t *testing.T) {
	cels := quality.CelSet()
	for _, scale := range []int{2, 4} {
		photo, _ := score(t, cels, scale, quality.Clean, recipeFor(upscale.Params{Scale: scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}))
		anime, _ := score(t, cels, scale, quality.Clean, recipeFor(upscale.Params{Scale: scale, ImageType: upscale.Anime, Denoise: upscale.DenoiseNone}))
		if anime <= photo {
			t.Errorf("×%d on the cel images: anime %.2f dB, photo %.2f dB; want anime ahead", scale, anime, photo)
		}
	}
}

// TestDenoiseIsMonotonic enlarges one noisy image at every level: each
// level must move the result further from the undenoised one than the
// level below it does.
func TestDenoiseIsMonotonic(t *testing.T) {
	butterfly := quality.LoadSet(t, "Set5")[1]
	noisy := quality.GaussianNoise(15).Source(t, quality.Shrink(butterfly, 2))
	var plain *quality.Image
	previous := -1.0
	for _, level := range quality.Levels {
		out, err := run(context.Background(), noisy, pngFormat, geometry{scale: 2}, recipeFor(upscale.Params{Scale: 2, Denoise: level}), bimg.ImageMetadata{})
		if err != nil {
			t.Fatal(err)
		}
		result := quality.Decode(t, out)
		if plain == nil {
			plain = result
			continue
		}
		a, _, _ := quality.Luma(plain, 0)
		b, _, _ := quality.Luma(result, 0)
		change := 255 / math.Pow(10, quality.PSNR(a, b)/20) // RMS difference
		if change <= previous {
			t.Errorf("denoise %s changes the result by %.2f (RMS), no more than the level below (%.2f)", level, change, previous)
		}
		previous = change
	}
}

// BenchmarkQuality scores every imageType and denoise level on Set5 and
// Set14 against bicubic and plain nohalo; run it once (-benchtime 1x).
func BenchmarkQuality(b *testing.B) {
	for _, set := range []string{"Set5", "Set14"} {
		images := quality.LoadSet(b, set)
		for _, scale := range []int{2, 4} {
			recipes := []struct {
				name string
				r    recipe
			}{{"bicubic", recipe{interpolator: "bicubic"}}, {"nohalo", recipe{interpolator: "nohalo"}}}
			for _, imageType := range []upscale.ImageType{upscale.Photo, upscale.Anime} {
				for _, level := range quality.Levels {
					recipes = append(recipes, struct {
						name string
						r    recipe
					}{string(imageType) + "-" + string(level), recipeFor(upscale.Params{Scale: scale, ImageType: imageType, Denoise: level})})
				}
			}
			for _, rc := range recipes {
				b.Run(set+"/x"+strconv.Itoa(scale)+"/"+rc.name, func(b *testing.B) {
					for range b.N {
						p, s := score(b, images, scale, quality.Clean, rc.r)
						b.ReportMetric(p, "dB")
						b.ReportMetric(s, "SSIM")
					}
				})
			}
		}
	}
}

// BenchmarkDenoise scores each denoise level (photo, ×2, Set5) on sources
// spoilt by Gaussian noise and by JPEG compression.
func BenchmarkDenoise(b *testing.B) {
	images := quality.LoadSet(b, "Set5")
	for _, d := range []quality.Degradation{quality.Clean, quality.GaussianNoise(5), quality.GaussianNoise(15), quality.GaussianNoise(25), quality.JPEG(30), quality.JPEG(60), quality.JPEGAsPNG(30)} {
		for _, level := range quality.Levels {
			b.Run(d.Name+"/"+string(level), func(b *testing.B) {
				for range b.N {
					p, s := score(b, images, 2, d, recipeFor(upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: level}))
					b.ReportMetric(p, "dB")
					b.ReportMetric(s, "SSIM")
				}
			})
		}
	}
}

// BenchmarkAnime compares the two imageTypes on the generated cel images
// and on Set14's comic and ppt3.
func BenchmarkAnime(b *testing.B) {
	sets := map[string][]*quality.Image{"cel": quality.CelSet()}
	for _, name := range []string{"comic", "ppt3"} {
		sets[name] = []*quality.Image{quality.Decode(b, quality.SetFile(b, "Set14/"+name+".png"))}
	}
	for _, name := range []string{"cel", "comic", "ppt3"} {
		for _, scale := range []int{2, 4} {
			for _, imageType := range []upscale.ImageType{upscale.Photo, upscale.Anime} {
				b.Run(name+"/x"+strconv.Itoa(scale)+"/"+string(imageType), func(b *testing.B) {
					for range b.N {
						p, s := score(b, sets[name], scale, quality.Clean, recipeFor(upscale.Params{Scale: scale, ImageType: imageType, Denoise: upscale.DenoiseNone}))
						b.ReportMetric(p, "dB")
						b.ReportMetric(s, "SSIM")
					}
				})
			}
		}
	}
}

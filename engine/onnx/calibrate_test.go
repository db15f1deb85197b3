package onnx

import (
	"context"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
)

// BenchmarkCalibrate scores every network level on every degradation of
// Set5 (photo) and of the art set (the cel images, comic and ppt3), ×2,
// with what the estimators read from the source (sigmaY: Pixels.Noise;
// jpegQ: Pixels.JPEGQuality): the data fitNoise and fitJPEG are chosen
// from. Run it once (-benchtime 1x).
func BenchmarkCalibrate(b *testing.B) {
	e, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	photos := quality.LoadSet(b, "Set5")
	art := quality.CelSet()
	for _, name := range []string{"comic", "ppt3"} {
		art = append(art, quality.Decode(b, quality.SetFile(b, "Set14/"+name+".png")))
	}
	sets := map[string][]*quality.Image{"photo": photos, "art": art}
	degradations := []quality.Degradation{quality.Clean, quality.GaussianNoise(3), quality.GaussianNoise(5), quality.GaussianNoise(10), quality.GaussianNoise(15), quality.GaussianNoise(25),
		quality.JPEG(30), quality.JPEG(50), quality.JPEG(60), quality.JPEG(75), quality.JPEG(85), quality.JPEG(95)}
	for _, setName := range []string{"photo", "art"} {
		for _, d := range degradations {
			// What the estimators read, averaged over the set.
			var sigma, q float64
			for _, hr := range sets[setName] {
				px, err := e.codec.Decode(context.Background(), d.Source(b, quality.Shrink(hr.Crop(hr.W/2*2, hr.H/2*2), 2)), upscale.Params{Scale: 2})
				if err != nil {
					b.Fatal(err)
				}
				noise, err := px.Noise()
				if err != nil {
					b.Fatal(err)
				}
				sigma += noise
				jq, _ := px.JPEGQuality()
				q += float64(jq)
			}
			n := float64(len(sets[setName]))
			for _, level := range quality.Levels {
				b.Run(setName+"/"+d.Name+"/"+string(level), func(b *testing.B) {
					for range b.N {
						p, s := quality.Score(b, sets[setName], 2, d, func(src []byte) ([]byte, error) {
							px, err := e.codec.Decode(context.Background(), src, upscale.Params{Scale: 2})
							if err != nil {
								return nil, err
							}
							img, err := e.enlargeAll(context.Background(), px, 2, 1, upscale.Params{Scale: 2, ImageType: upscale.Photo}, level)
							return img.Data, err
						})
						b.ReportMetric(p, "dB")
						b.ReportMetric(s, "SSIM")
						b.ReportMetric(sigma/n, "sigmaY")
						b.ReportMetric(q/n, "jpegQ")
					}
				})
			}
		}
	}
}

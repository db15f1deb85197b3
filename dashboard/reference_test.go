package dashboard_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/upscalekit/upscale/upscaletest"
)

// TestReferenceBodies: the upscale operation shows both its bodies, the
// JSON one and the upload's form, each with its fields and examples; a
// form's example is its parts, one a line, the file first.
func TestReferenceBodies(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	status, page, _ := s.do("GET", "/reference", "", nil)
	if status != http.StatusOK {
		t.Fatalf("the reference: %d", status)
	}
	start, end := strings.Index(page, `id="post-api-v1-upscale"`), strings.Index(page, `id="get-api-v1-upscale-jobs-id"`)
	if start < 0 || end < start {
		t.Fatalf("the reference has no POST /api/v1/upscale before the job's GET")
	}
	op := page[start:end]
	json, form := strings.Index(op, "<h3>Body (JSON)</h3>"), strings.Index(op, "<h3>Body (multipart/form-data)</h3>")
	if json < 0 || form < json {
		t.Fatalf("POST /api/v1/upscale does not show its JSON body, then its form:\n%s", op)
	}
	for _, want := range []string{
		`<td><code>imageUrl</code> <span class="required">required</span></td>`,
		`&#34;imageUrl&#34;: &#34;https://example.com/cat.jpg&#34;`,
	} {
		if !strings.Contains(op[json:form], want) {
			t.Errorf("the JSON body lacks %q", want)
		}
	}
	for _, want := range []string{
		"The multipart/form-data form of UpscaleRequest: the image file in the part <code>image</code>",
		"<td><code>image</code> <span class=\"required\">required</span> <span class=\"hint\">(or imageUrl)</span></td>\n    <td>file</td>",
		"<td><code>imageUrl</code> <span class=\"required\">required</span> <span class=\"hint\">(or image)</span></td>",
		"<td><code>scale</code></td>\n    <td>integer</td>",
		"One of: <code>2, 4, 8, 16</code>",
		"Example: upload. The file photo.jpg, ×2, as <code>curl -F image=@photo.jpg -F scale=2</code> sends it.",
		"<code>image: (the bytes of photo.jpg)\nscale: 2</code>",
		"<code>image: (the bytes of sketch.png)\nformat: webp\nimageType: anime\nquality: 85\nscale: 4</code>",
	} {
		if !strings.Contains(op[form:], want) {
			t.Errorf("the form's body lacks %q", want)
		}
	}
	if strings.Contains(op[form:], "<h3>Body (JSON)</h3>") || strings.Contains(op[form:], "&#34;image&#34;") {
		t.Error("the form's example is shown as JSON")
	}
}

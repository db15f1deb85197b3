package dashboard_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/internal/browsertest"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestTryDropInABrowser: in chromium, a file dropped on Try it's drop
// zone is chosen, and the form uploads it: enlarged, charged, shown
// beside its result. Both pages pass axe-core and fit a phone.
func TestTryDropInABrowser(t *testing.T) {
	b := browsertest.New(t)
	s := newSite(t, upscaletest.NewClock(start), func(c *dashboard.Config) {
		c.Account = func(*http.Request) string { return "acme" } // the browser sends no X-Test-Account
	})
	b.Do(chromedp.Navigate(s.server.URL+"/dashboard/try"), chromedp.WaitVisible("form.try"))
	b.Check("try")

	file := base64.StdEncoding.EncodeToString(upscaletest.TestImagePNG(t, 8, 8))
	chosen, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`(() => {
		const bytes = Uint8Array.from(atob("`+file+`"), c => c.charCodeAt(0));
		const dropped = new DataTransfer();
		dropped.items.add(new File([bytes], "drop.png", {type: "image/png"}));
		const drop = document.getElementById("drop");
		for (const type of ["dragenter", "dragover", "drop"]) {
			drop.dispatchEvent(new DragEvent(type, {dataTransfer: dropped, bubbles: true, cancelable: true}));
		}
		const hint = document.getElementById("drop-hint");
		return (hint.hidden ? "hint hidden, " : "") + Array.from(document.getElementById("image").files, f => f.name).join(",");
	})()`))
	if err != nil || chosen != "drop.png" {
		t.Fatalf("after the drop the file input holds %q (%v); want drop.png, and the hint shown", chosen, err)
	}

	b.Do(chromedp.Click("form.try button"), chromedp.WaitVisible("#result-image"))
	before, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`document.getElementById("before").src`))
	if err != nil || !strings.HasPrefix(before, "data:image/png;base64,") {
		t.Errorf("the source beside the result: %.40q (%v); want the file dropped", before, err)
	}
	if curl := b.Text("#curl"); !strings.HasPrefix(curl, "curl -F image=@drop.png -F scale=2") {
		t.Errorf("the curl command %q does not upload the file", curl)
	}
	if bal, _ := s.ledger.Balance(context.Background(), "acme"); bal.Free != 9 {
		t.Errorf("free images left %d, want 9: the upload charged once", bal.Free)
	}
	b.Check("try-upload-result")
}

package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestHistory: the History page lists the account's calls, the newest
// first, with the key that sent each by its name, what it asked, how it
// ended and what it made, and the result's link while it works; it shows
// one key's calls when asked, and never another account's.
func TestHistory(t *testing.T) {
	clock := upscaletest.NewClock(start)
	history := upscale.NewMemoryCallHistory(upscale.MemoryCallHistoryOptions{Now: clock.Now})
	s := newSite(t, clock, func(c *dashboard.Config) { c.History = history })
	if status, page, _ := s.do("GET", "/history", "acme", nil); status != http.StatusOK || !strings.Contains(page, `id="no-calls"`) || !strings.Contains(page, `href="./history" aria-current="page">History</a>`) {
		t.Fatalf("the history of an account without calls: %d\n%s", status, page)
	}
	_, made, _ := s.do("POST", "/keys", "acme", url.Values{"name": {"CI"}})
	key := regexp.MustCompile(`<code id="new-key">(upk_[a-z0-9]+)</code>`).FindStringSubmatch(made)[1]
	ctx := context.Background()
	for _, c := range []upscale.Call{
		{ID: "req_ok", AccountID: "acme", KeyID: upscale.KeyID(key), At: start.Add(-time.Minute), Params: upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseLow},
			Status: 200, Pool: upscale.PoolFree, Engine: "classical;scale=4", Took: 1500 * time.Millisecond, SourceBytes: 300 << 10, ResultBytes: 3 << 20,
			ResultURL: "http://results.test/outputs/r.png", ResultExpires: start.Add(time.Hour)},
		{ID: "req_old", AccountID: "acme", KeyID: upscale.KeyID(key), At: start.Add(-2 * time.Hour), Params: upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax},
			Status: 200, Pool: upscale.PoolCredit, ResultURL: "http://results.test/outputs/old.png", ResultExpires: start.Add(-time.Hour)},
		{ID: "job_tried", AccountID: "acme", Job: true, At: start.Add(-3 * time.Hour), Params: upscale.Params{Scale: 8, ImageType: upscale.Anime, Denoise: upscale.DenoiseMax},
			Status: 403, Code: "paid_plan_required"},
		{ID: "req_globex", AccountID: "globex", At: start, Status: 200, ResultURL: "http://results.test/outputs/globex.png"},
	} {
		if err := history.RecordCall(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	_, page, _ := s.do("GET", "/history", "acme", nil)
	rows := regexp.MustCompile(`(?s)<tr>\s*<td>(.*?)</tr>`).FindAllStringSubmatch(page, -1)
	if len(rows) != 3 || strings.Contains(page, "globex.png") {
		t.Fatalf("acme's history has %d rows, want its 3 calls alone\n%s", len(rows), page)
	}
	for i, want := range []string{
		"<td>CI</td>\n    <td>×4 photo, denoise low</td>\n    <td>ok</td>\n    <td>free_pool</td>\n    <td>classical;scale=4</td>\n    <td>1.5 s</td>\n    <td>300 KB</td>\n    <td>3 MB <a href=\"http://results.test/outputs/r.png\">open</a></td>",
		"<td>credit</td>",
		"<td>Try it</td>\n    <td>job, ×8 anime, denoise max</td>\n    <td>403 <code>paid_plan_required</code></td>\n    <td>not charged</td>",
	} {
		if !strings.Contains(rows[i][1], want) {
			t.Errorf("row %d lacks %q:\n%s", i+1, want, rows[i][1])
		}
	}
	if strings.Contains(rows[1][1], "old.png") {
		t.Errorf("a result whose link expired is linked:\n%s", rows[1][1])
	}
	_, page, _ = s.do("GET", "/history?key="+upscale.KeyID(key), "acme", nil)
	if rows := regexp.MustCompile(`(?s)<tr>\s*<td>`).FindAllString(page, -1); len(rows) != 2 || !strings.Contains(page, `selected>CI</option>`) {
		t.Errorf("one key's history: %d rows\n%s", len(rows), page)
	}
	if _, page, _ = s.do("GET", "/history?key=0123456789abcdef", "acme", nil); len(regexp.MustCompile(`(?s)<tr>\s*<td>`).FindAllString(page, -1)) != 3 {
		t.Errorf("a key the account does not have shows all its calls, not none:\n%s", page)
	}
}

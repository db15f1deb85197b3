package dashboard

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/upscalekit/upscale"
)

// historyPage is the account's latest calls, requests and jobs
// (Config.History), by one key or all.
type historyPage struct {
	frame
	Calls []historyRow
	// Keys are the account's keys, to choose one by; Key the one chosen,
	// "" for all.
	Keys []upscale.KeyInfo
	Key  string
}

// historyRow is a call as the page shows it: its key by hint or name,
// and its result's link while it works.
type historyRow struct {
	upscale.Call
	KeyName string
	Link    string
}

func (d *Dashboard) history(w http.ResponseWriter, r *http.Request, account string) {
	keys, err := d.cfg.Keys.ListKeys(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "list the keys", err)
		return
	}
	page := historyPage{frame: d.frame(r, account, "history"), Keys: keys}
	names := map[string]string{}
	for _, k := range keys {
		names[k.ID] = cmp.Or(k.Name, k.Hint, k.ID)
		if k.ID == r.URL.Query().Get("key") {
			page.Key = k.ID // another account's key, or none, is all of them
		}
	}
	calls, err := d.cfg.History.Calls(r.Context(), account, upscale.CallQuery{KeyID: page.Key})
	if err != nil {
		d.fail(w, r, account, "read the history", err)
		return
	}
	now := d.cfg.Now()
	for _, c := range calls {
		row := historyRow{Call: c, KeyName: cmp.Or(names[c.KeyID], "Try it")}
		if c.ResultURL != "" && now.Before(c.ResultExpires) {
			row.Link = c.ResultURL
		}
		page.Calls = append(page.Calls, row)
	}
	d.render(w, r, http.StatusOK, "history", page)
}

// seconds writes a duration as the history shows it: "1.5 s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}

package dashboard

import (
	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"net/http"
	"slices"
	"time"
)

// pool is one row of the overview's balances.
type pool struct {
	Name string
	Left int64
	// Of is the pool's allowance, 0 for pools that do not refill.
	Of int64
}

// bar is one day of the overview's chart, in the SVG's units.
type bar struct {
	Day          int
	Images       int64
	X, Y, Height int
	// Middle is the bar's middle, where its day's label is centred.
	Middle int
}

// monthTotal is one past month's images.
type monthTotal struct {
	Month  string
	Images int64
}

type overviewPage struct {
	frame
	Plan   upscale.Plan
	Pools  []pool
	Refill time.Time
	// Charted is whether the ledger reports usage (UsageReporter); the
	// rest of the page's usage is empty otherwise.
	Charted   bool
	UsedMonth int64
	Bars      []bar
	Width     int
	Months    []monthTotal
	// Share is the account's share link and what it earned, when the
	// dashboard has a ShareBonus.
	Share *sharePanel
	// NoKeys says the account has never had a key: the page shows how to
	// make the first.
	NoKeys bool
}

// sharePanel is an account's share link, its terms, and what it earned
// this month.
type sharePanel struct {
	Link string
	accounts.Share
}

// The chart's geometry: one bar per day.
const (
	barWidth, barGap, chartHeight = 14, 4, 120
)

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, account string) {
	ctx := r.Context()
	b, err := d.balance(r, account)
	if err != nil {
		d.fail(w, r, account, "read the balance", err)
		return
	}
	now := d.cfg.Now()
	monthStart, refill := upscale.MonthBounds(now)
	page := overviewPage{frame: d.frame(r, account, "overview"), Plan: b.Plan, Pools: pools(b), Refill: refill}
	keys, err := d.cfg.Keys.ListKeys(ctx, account)
	if err != nil {
		d.fail(w, r, account, "list the keys", err)
		return
	}
	page.NoKeys = len(keys) == 0
	if usage, ok := d.cfg.Ledger.(upscale.UsageReporter); ok {
		days, err := usage.UsageByDay(ctx, account, monthStart.AddDate(-1, 0, 0), now)
		if err != nil {
			d.fail(w, r, account, "read the usage", err)
			return
		}
		page.Charted = true
		page.UsedMonth, page.Bars, page.Months = chart(days, monthStart, refill)
		page.Width = len(page.Bars)*(barWidth+barGap) + 24 // and room for the labels at both ends
	}
	if b := d.cfg.ShareBonus; b != nil {
		share, err := b.Share(ctx, account, now)
		if err != nil {
			d.fail(w, r, account, "read the share link", err)
			return
		}
		page.Share = &sharePanel{Link: d.cfg.SignIn.opts.BaseURL + "signup?ref=" + share.Code, Share: share}
	}
	d.render(w, r, http.StatusOK, "overview", page)
}

// pools are the rows of b's balances, none on an unlimited plan.
func pools(b upscale.Balance) []pool {
	if b.Plan.Unlimited {
		return nil
	}
	var rows []pool
	if b.Plan.MonthlyImages > 0 {
		rows = append(rows, pool{Name: "Free images this month", Left: b.Free, Of: b.Plan.MonthlyImages})
	}
	return append(rows, pool{Name: "Share bonus", Left: b.ShareBonus}, pool{Name: "Credits", Left: b.Credits})
}

// chart lays out this month's days (from monthStart until next) as bars,
// and totals the months before it, the latest first.
func chart(days []upscale.DayUsage, monthStart, next time.Time) (usedMonth int64, bars []bar, months []monthTotal) {
	perDay := map[int]int64{}
	var most int64 = 1
	for _, du := range days {
		var n int64
		for _, images := range du.ByPool {
			n += images
		}
		if du.Day.Before(monthStart) {
			month := du.Day.Format("January 2006")
			if len(months) == 0 || months[len(months)-1].Month != month {
				months = append(months, monthTotal{Month: month})
			}
			months[len(months)-1].Images += n
			continue
		}
		perDay[du.Day.Day()] += n
		usedMonth += n
		most = max(most, perDay[du.Day.Day()])
	}
	for day := 1; day <= next.AddDate(0, 0, -1).Day(); day++ {
		height := int(perDay[day] * chartHeight / most)
		x := (day - 1) * (barWidth + barGap)
		bars = append(bars, bar{Day: day, Images: perDay[day], X: x, Y: chartHeight - height, Height: height, Middle: x + barWidth/2})
	}
	slices.Reverse(months)
	return usedMonth, bars, months
}

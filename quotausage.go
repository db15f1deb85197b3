package upscale

import (
	"context"
	"time"
)

// DayUsage is what an account was charged on one day (UTC).
type DayUsage struct {
	// Day is 00:00 UTC of the day.
	Day time.Time `json:"day"`
	// ByPool is how many images were charged that day, by the pool that
	// paid; only pools that paid are present.
	ByPool map[Pool]int64 `json:"byPool"`
}

// UsageReporter is a QuotaLedger that says what an account was charged,
// day by day, for an account page (the dashboard's chart). MemoryLedger and
// sqlstore.Store are UsageReporters; upscaletest.TestUsageReporter is the
// contract.
type UsageReporter interface {
	QuotaLedger
	// UsageByDay returns accountID's charges per day (UTC), from the day
	// of from to the day of to, both included: only the days with a
	// charge, the oldest first. A charge counts on the day it was
	// committed; a released or expired reservation is no charge. An
	// unknown account has none: an empty list, not an error.
	UsageByDay(ctx context.Context, accountID string, from, to time.Time) ([]DayUsage, error)
}

// FirstCharger is a QuotaLedger that says which accounts were first
// charged since a time, for accounts.ShareBonus, which pays a share link
// on the first charge of the account it brought. MemoryLedger and
// sqlstore.Store are FirstChargers; upscaletest.TestFirstCharger is the
// contract.
type FirstCharger interface {
	QuotaLedger
	// FirstCharges returns the accounts whose first charge ever was
	// committed at or after since, each with the time of that charge: a
	// pass that asks from where its last one ended learns of each first
	// charge once, without asking account by account. An account charged
	// before since is not in it, however often it was charged after.
	FirstCharges(ctx context.Context, since time.Time) (map[string]time.Time, error)
}

// dayNumber is the number of t's day (UTC) since 1970-01-01.
func dayNumber(t time.Time) int64 { return t.Unix() / 86400 }

// DayBounds returns the first instant of from's day (UTC) and the first
// instant after to's day, the range UsageByDay covers.
func DayBounds(from, to time.Time) (start, end time.Time) {
	return time.Unix(dayNumber(from)*86400, 0).UTC(), time.Unix((dayNumber(to)+1)*86400, 0).UTC()
}

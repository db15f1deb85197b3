package upscale

import "time"

// sweepGate lets a store that sweeps as it is used, instead of on a
// goroutine that would need stopping, sweep at most once a minute. Its
// owner's lock guards it.
type sweepGate struct{ last time.Time }

// due reports whether a minute has passed since the last sweep, and if so
// counts this one.
func (g *sweepGate) due(now time.Time) bool {
	if now.Sub(g.last) < time.Minute {
		return false
	}
	g.last = now
	return true
}

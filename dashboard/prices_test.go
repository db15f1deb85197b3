package dashboard

import (
	"testing"

	"github.com/upscalekit/upscale"
)

func TestPrice(t *testing.T) {
	for _, tc := range []struct {
		cost upscale.Cost
		want string
	}{
		{upscale.Cost{}, ""},
		{upscale.Cost{Amount: 1000, Currency: "usd"}, "$10.00"},
		{upscale.Cost{Amount: 123456789, Currency: "usd"}, "$1,234,567.89"},
		{upscale.Cost{Amount: 0, Currency: "usd"}, "$0.00"},
		{upscale.Cost{Amount: 2900, Currency: "eur", Interval: "month", IntervalCount: 1}, "€29.00 a month"},
		{upscale.Cost{Amount: 1250, Currency: "chf", Interval: "month", IntervalCount: 3}, "CHF 12.50 every 3 months"},
		{upscale.Cost{Amount: 1000, Currency: "jpy"}, "¥1,000"},
		{upscale.Cost{Amount: 1500, Currency: "kwd"}, "KWD 1.500"},
		{upscale.Cost{Amount: -150, Currency: "usd"}, "-$1.50"},
		{upscale.Cost{Amount: -50, Currency: "chf"}, "-CHF 0.50"},
	} {
		if got := Price(tc.cost); got != tc.want {
			t.Errorf("Price(%+v) = %q, want %q", tc.cost, got, tc.want)
		}
	}
}

func TestPriceEach(t *testing.T) {
	for _, tc := range []struct {
		cost  upscale.Cost
		units int64
		want  string
	}{
		{upscale.Cost{Amount: 1000, Currency: "usd"}, 1000, "$0.01"},
		{upscale.Cost{Amount: 700, Currency: "usd"}, 500, "$0.014"},
		{upscale.Cost{Amount: 1000, Currency: "usd"}, 3, "$3.3333"},
		{upscale.Cost{Amount: 1000, Currency: "jpy"}, 3, "¥333.33"},
		{upscale.Cost{Amount: 1000, Currency: "usd"}, 0, ""},
		{upscale.Cost{Amount: 1, Currency: "usd"}, 1000, "less than $0.0001"},
		{upscale.Cost{Amount: 0, Currency: "usd"}, 1000, "$0.00"},
		{upscale.Cost{}, 10, ""},
	} {
		if got := priceEach(tc.cost, tc.units); got != tc.want {
			t.Errorf("priceEach(%+v, %d) = %q, want %q", tc.cost, tc.units, got, tc.want)
		}
	}
}

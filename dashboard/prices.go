package dashboard

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/upscalekit/upscale"
)

// Price is what c costs as a buyer reads it: "$10.00", "€29.00 a month",
// "¥1,000", "CHF 12.50 every 3 months"; "" when the cost is unknown.
func Price(c upscale.Cost) string {
	if !c.Known() {
		return ""
	}
	s := money(c.Currency, float64(c.Amount), 0)
	switch {
	case c.Interval == "":
		return s
	case c.IntervalCount <= 1:
		return s + " a " + c.Interval
	}
	return fmt.Sprintf("%s every %d %ss", s, c.IntervalCount, c.Interval)
}

// priceEach is what one of units costs at c, with up to two more
// decimals than the currency has, so that a small share still reads
// ("$0.014"); "" when the cost is unknown or units not positive.
func priceEach(c upscale.Cost, units int64) string {
	if !c.Known() || units <= 0 {
		return ""
	}
	each := float64(c.Amount) / float64(units)
	if each > 0 && each < 0.005 { // rounds to nothing at two more decimals
		return "less than " + money(c.Currency, 0.01, 2)
	}
	return money(c.Currency, each, 2)
}

// money writes minor units of currency with its decimals and up to extra
// more, the zeros past its own dropped, and the thousands grouped.
func money(currency string, minor float64, extra int) string {
	code := strings.ToUpper(currency)
	decimals := decimalsOf(code)
	major := minor
	for range decimals {
		major /= 10
	}
	sign := ""
	if major < 0 {
		sign, major = "-", -major
	}
	whole, fraction, _ := strings.Cut(strconv.FormatFloat(major, 'f', decimals+extra, 64), ".")
	for len(fraction) > decimals && strings.HasSuffix(fraction, "0") {
		fraction = fraction[:len(fraction)-1]
	}
	n, _ := strconv.ParseInt(whole, 10, 64)
	s := count(n)
	if fraction != "" {
		s += "." + fraction
	}
	if symbol, ok := map[string]string{"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}[code]; ok {
		return sign + symbol + s
	}
	return sign + code + " " + s
}

// decimalsOf is how many decimals the currency code's amounts have: the
// cent's two, but for ISO 4217's currencies whose smallest unit is the
// whole or the thousandth.
func decimalsOf(code string) int {
	switch code {
	case "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF":
		return 0
	case "BHD", "JOD", "KWD", "OMR", "TND":
		return 3
	}
	return 2
}

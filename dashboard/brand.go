package dashboard

import (
	"cmp"
	"errors"
	"net/mail"
	"net/url"
	"strings"
)

// Brand is who sells: the operator's product, as every page, every mail
// and the storefront name it.
type Brand struct {
	// Name is the product's name. Empty means "upscale".
	Name string
	// Tagline is one sentence on what it does, under the name on the
	// storefront. Empty means one that says what the API does.
	Tagline string
	// Support is the address customers write to, in every page's footer
	// and every mail. Empty shows none.
	Support string
	// LogoURL is an image shown before the name: a path on this site
	// ("/logo.svg") or an https URL, whose origin the pages' policy then
	// lets images come from. Empty shows none.
	LogoURL string
}

// defaultTagline says what the API does, for a Brand without a Tagline.
const defaultTagline = "Enlarge photos and drawings ×2 to ×16 through one HTTP call, sharper than resizing."

// withDefaults returns b checked, with its defaults.
func (b Brand) withDefaults() (Brand, error) {
	b.Name = cmp.Or(strings.TrimSpace(b.Name), "upscale")
	b.Tagline = cmp.Or(strings.TrimSpace(b.Tagline), defaultTagline)
	if b.Support != "" {
		if a, err := mail.ParseAddress(b.Support); err != nil || a.Name != "" {
			return Brand{}, errors.New("dashboard: Config.Brand.Support: want a bare address, such as help@example.com")
		}
	}
	if b.LogoURL != "" {
		u, err := url.Parse(b.LogoURL)
		if err != nil || !(u.Scheme == "https" && origin(b.LogoURL) != "" || u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, "/")) {
			return Brand{}, errors.New("dashboard: Config.Brand.LogoURL: want a path on this site, such as /logo.svg, or an https URL")
		}
	}
	return b, nil
}

// logoOrigin is the origin the logo comes from, "" for this site's own.
func (b Brand) logoOrigin() string { return origin(b.LogoURL) }

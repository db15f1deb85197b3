package dashboard

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
)

// StorefrontOptions configures the page Storefront serves.
type StorefrontOptions struct {
	// Dashboard is the dashboard's path as the storefront's visitors
	// reach it, such as "/dashboard/": the page's links and its email
	// form lead there. Required.
	Dashboard string
	// Showcase, when set, shows what the service does to a sample.
	Showcase *Showcase
	// Example is the image address the page's curl command enlarges.
	// Empty means the Showcase's Before, else a placeholder.
	Example string
}

// Showcase is a sample enlarged, shown as a before/after slider: Before
// is the source, which the browser scales to After's size without
// smoothing, so that the visitor sees the pixels there were; After is the
// service's result. Both are URLs the page may load (this site's, or an
// origin its policy then allows).
type Showcase struct {
	Before, After string
	// Caption says what was done: "A photo, ×4 by the learned engine".
	Caption string
}

type storefrontPage struct {
	frame
	Showcase *Showcase
	// SignUps is whether the email form opens accounts, on a plan of
	// FreeImages a month; EmailForm whether there is a form at all (the
	// dashboard mails links), else a link to the dashboard.
	SignUps, EmailForm bool
	FreeImages         int64
	// ShareBonus is what a share link earns its sharer, zero without.
	ShareBonus   int64
	Packs, Plans []upscale.Offer
	Curl         string
}

// Storefront returns the page a host serves at its site's root: the
// operator's product (Config.Brand), a sample before and after, the free
// allowance new accounts get, every pack and plan with its price, an
// email form that opens an account (or signs one in, when sign-ups are
// closed), and the API as one curl command. It is read with the same
// headers as the dashboard's pages.
func (d *Dashboard) Storefront(opts StorefrontOptions) (http.Handler, error) {
	if !strings.HasPrefix(opts.Dashboard, "/") || !strings.HasSuffix(opts.Dashboard, "/") {
		return nil, errors.New("dashboard: StorefrontOptions.Dashboard: want the dashboard's path, such as /dashboard/")
	}
	example := opts.Example
	if example == "" && opts.Showcase != nil {
		example = opts.Showcase.Before
	}
	if example == "" {
		example = "https://example.com/photo.jpg"
	}
	body, _ := json.Marshal(client.Request{ImageURL: example, Scale: 2, ImageType: string(upscale.Photo), Denoise: string(upscale.DenoiseLow)})
	policy := d.policy
	if opts.Showcase != nil {
		policy = withImagesFrom(policy, origin(opts.Showcase.Before), origin(opts.Showcase.After))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page := storefrontPage{frame: d.frame(r, "", "storefront"), Showcase: opts.Showcase, Curl: curlCommand(d.cfg.APIURL, body)}
		page.Root = opts.Dashboard
		if d.cfg.SignIn != nil && d.cfg.SignIn.opts.Email != nil {
			e := d.cfg.SignIn.opts.Email
			page.EmailForm, page.SignUps = true, e.SignUps
			if e.SignUps {
				page.FreeImages = e.Plan.MonthlyImages
			}
		}
		if d.cfg.ShareBonus != nil {
			page.ShareBonus, _ = d.cfg.ShareBonus.Terms()
		}
		if d.cfg.Seller != nil {
			page.Packs, page.Plans = splitOffers(d.cfg.Seller.Offers())
		}
		d.setHeaders(w)
		w.Header().Set("Content-Security-Policy", policy)
		d.render(w, r, http.StatusOK, "storefront", page)
	}), nil
}

package dashboard

import (
	"errors"
	"github.com/upscalekit/upscale"
	"net/http"
	"slices"
)

type keysPage struct {
	frame
	Keys []upscale.KeyInfo
	// Made is the key just made, shown this once, and its name.
	Made, MadeName string
	// Problem says why the name given was refused.
	Problem, Name string
}

func (d *Dashboard) keys(w http.ResponseWriter, r *http.Request, account string) {
	d.renderKeys(w, r, account, http.StatusOK, keysPage{})
}

// renderKeys renders the keys page with the account's keys and what page
// already holds.
func (d *Dashboard) renderKeys(w http.ResponseWriter, r *http.Request, account string, status int, page keysPage) {
	keys, err := d.cfg.Keys.ListKeys(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "list the keys", err)
		return
	}
	page.frame, page.Keys = d.frame(r, account, "keys"), keys
	d.render(w, r, status, "keys", page)
}

func (d *Dashboard) createKey(w http.ResponseWriter, r *http.Request, account string) {
	name := r.PostFormValue("name")
	if err := upscale.ValidateKeyName(name); err != nil {
		d.renderKeys(w, r, account, http.StatusBadRequest, keysPage{Problem: err.Error(), Name: name})
		return
	}
	key := upscale.NewKey(d.cfg.KeyPrefix)
	info, err := d.cfg.Keys.AddNamedKey(r.Context(), key, account, name)
	if err != nil {
		d.fail(w, r, account, "make a key", err)
		return
	}
	d.cfg.Logger.Info("dashboard: key made", "account", account, "key_id", info.ID)
	d.renderKeys(w, r, account, http.StatusCreated, keysPage{Made: key, MadeName: name})
}

type revokePage struct {
	frame
	Key upscale.KeyInfo
}

// keyNotFound answers for a key the account does not have: another
// account's, a revoked one, an unknown one, and an ID no key can have
// alike.
func (d *Dashboard) keyNotFound(w http.ResponseWriter, r *http.Request, account string) {
	d.notFound(w, r, account, "keys", "This account has no such key, or it is revoked already.", "your API keys")
}

// confirmRevoke asks whether to revoke the key the path names. The revoke
// pages take the key's ID from a path that is anyone's: an ID no key can
// have is not found before any store is asked, as a store may refuse it
// (PostgreSQL refuses text that is not UTF-8).
func (d *Dashboard) confirmRevoke(w http.ResponseWriter, r *http.Request, account string) {
	id := r.PathValue("id")
	if !upscale.ValidKeyID(id) {
		d.keyNotFound(w, r, account)
		return
	}
	keys, err := d.cfg.Keys.ListKeys(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "list the keys", err)
		return
	}
	i := slices.IndexFunc(keys, func(k upscale.KeyInfo) bool { return k.ID == id && k.Revoked.IsZero() })
	if i < 0 {
		d.keyNotFound(w, r, account)
		return
	}
	d.render(w, r, http.StatusOK, "revoke", revokePage{frame: d.frame(r, account, "keys"), Key: keys[i]})
}

func (d *Dashboard) revokeKey(w http.ResponseWriter, r *http.Request, account string) {
	id := r.PathValue("id")
	if !upscale.ValidKeyID(id) {
		d.keyNotFound(w, r, account)
		return
	}
	err := d.cfg.Keys.RevokeKeyID(r.Context(), account, id)
	if errors.Is(err, upscale.ErrNotFound) {
		d.keyNotFound(w, r, account)
		return
	}
	if err != nil {
		d.fail(w, r, account, "revoke a key", err)
		return
	}
	d.cfg.Logger.Info("dashboard: key revoked", "account", account, "key_id", id)
	// Relative to this page, as the mount point is the host's: Redirect
	// would resolve it against the path after the host's StripPrefix.
	w.Header().Set("Location", "../../keys")
	w.WriteHeader(http.StatusSeeOther)
}

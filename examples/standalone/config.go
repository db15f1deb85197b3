package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/sqlstore"
)

// fileConfig is the JSON file given with -config.
type fileConfig struct {
	FreeTierMaxFileBytes int64               `json:"freeTierMaxFileBytes"`
	Plans                map[string]filePlan `json:"plans"`
	Accounts             []fileAccount       `json:"accounts"`
	Keys                 []fileKey           `json:"keys"`
	Billing              fileBilling         `json:"billing"`
	// SignUpPlan is the plan of the accounts people open by email
	// (-smtp-url): "free" when empty and the file has such a plan.
	SignUpPlan string `json:"signUpPlan"`
	// ShareBonus, when set, gives each account a share link: an account
	// opened by email through it earns the sharer PerSignup images of
	// share bonus once it has used its first image, at most MonthlyCap a
	// month.
	ShareBonus *fileShareBonus `json:"shareBonus"`
	// Brand names the product on the dashboard's pages, in its mails and
	// on the storefront (dashboard.Brand).
	Brand fileBrand `json:"brand"`
	// Networks are learned networks the operator brings, for -engine
	// onnx (onnx.Model; docs/engines.md), and Rules pick them for passes
	// (onnx.Rule).
	Networks []fileNetwork `json:"networks"`
	Rules    []fileRule    `json:"rules"`
}

// fileNetwork is an onnx.Model: its ncnn .param file (the .bin beside
// it) or its ONNX file, and its INT8 twin (cmd/int8twin's), each a path
// relative to the config file's directory, and the side of its tiles
// where not the engine's (onnx.Model.Tile).
type fileNetwork struct {
	Name      string `json:"name"`
	Param     string `json:"param"`
	ONNX      string `json:"onnx"`
	INT8      string `json:"int8"`
	Published bool   `json:"published"`
	Tile      int    `json:"tile"`
}

// fileRule is an onnx.Rule.
type fileRule struct {
	Network   string   `json:"network"`
	ImageType string   `json:"imageType"`
	Denoise   []string `json:"denoise"`
	Scales    []int    `json:"scales"`
}

type fileBrand struct {
	Name    string `json:"name"`
	Tagline string `json:"tagline"`
	Support string `json:"support"`
	LogoURL string `json:"logoUrl"`
}

type fileShareBonus struct {
	PerSignup  int64 `json:"perSignup"`
	MonthlyCap int64 `json:"monthlyCap"`
}

type filePlan struct {
	Paid          bool  `json:"paid"`
	Unlimited     bool  `json:"unlimited"`
	MonthlyImages int64 `json:"monthlyImages"`
	MaxFileBytes  int64 `json:"maxFileBytes"`
}

type fileAccount struct {
	ID         string `json:"id"`
	Plan       string `json:"plan"`
	Credits    int64  `json:"credits"`
	ShareBonus int64  `json:"shareBonus"`
}

type fileKey struct {
	Key     string `json:"key"`
	Account string `json:"account"`
	Revoked bool   `json:"revoked"`
}

// loadConfig reads a config file. Every error names the offending field.
func loadConfig(path string) (fileConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return fileConfig{}, err
	}
	var c fileConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return fileConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fileConfig{}, fmt.Errorf("%s: data after the JSON object", path)
	}
	if err := c.validate(); err != nil {
		return fileConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	for i := range c.Networks {
		for _, file := range []*string{&c.Networks[i].Param, &c.Networks[i].ONNX, &c.Networks[i].INT8} {
			if *file != "" && !filepath.IsAbs(*file) {
				*file = filepath.Join(filepath.Dir(path), *file)
			}
		}
	}
	return c, nil
}

func (c fileConfig) validate() error {
	if c.FreeTierMaxFileBytes < 0 {
		return errors.New("freeTierMaxFileBytes: cannot be negative")
	}
	networks := map[string]bool{}
	for i, n := range c.Networks {
		if n.Name == "" || (n.Param == "") == (n.ONNX == "") {
			return fmt.Errorf("networks[%d]: name is required, and one of param and onnx", i)
		}
		if n.Tile < 0 {
			return fmt.Errorf("networks[%d]: tile is a side in pixels, or 0 for the engine's", i)
		}
		networks[n.Name] = true
	}
	for i, r := range c.Rules {
		switch {
		case !networks[r.Network]:
			return fmt.Errorf("rules[%d].network: no network %q in networks", i, r.Network)
		case r.ImageType != "" && !slices.Contains(upscale.ImageTypes(), upscale.ImageType(r.ImageType)):
			return fmt.Errorf("rules[%d].imageType: %q is not one of %v", i, r.ImageType, upscale.ImageTypes())
		}
		for _, d := range r.Denoise {
			if !slices.Contains(upscale.DenoiseLevels(), upscale.Denoise(d)) {
				return fmt.Errorf("rules[%d].denoise: %q is not one of %v", i, d, upscale.DenoiseLevels())
			}
		}
		for _, s := range r.Scales {
			if !slices.Contains(upscale.Scales(), s) {
				return fmt.Errorf("rules[%d].scales: %d is not one of %v", i, s, upscale.Scales())
			}
		}
	}
	for name, p := range c.Plans {
		if p.MonthlyImages < 0 || p.MaxFileBytes < 0 {
			return fmt.Errorf("plans.%s: monthlyImages and maxFileBytes cannot be negative", name)
		}
	}
	accounts := map[string]bool{}
	for i, a := range c.Accounts {
		_, knownPlan := c.Plans[a.Plan]
		switch {
		case a.ID == "":
			return fmt.Errorf("accounts[%d].id: is required", i)
		case accounts[a.ID]:
			return fmt.Errorf("accounts[%d].id: duplicate account %q", i, a.ID)
		case !knownPlan:
			return fmt.Errorf("accounts[%d].plan: unknown plan %q", i, a.Plan)
		case a.Credits < 0:
			return fmt.Errorf("accounts[%d].credits: cannot be negative", i)
		case a.ShareBonus < 0:
			return fmt.Errorf("accounts[%d].shareBonus: cannot be negative", i)
		}
		accounts[a.ID] = true
	}
	if err := c.Billing.validate(c.Plans); err != nil {
		return err
	}
	if _, ok := c.Plans[c.SignUpPlan]; c.SignUpPlan != "" && !ok {
		return fmt.Errorf("signUpPlan: unknown plan %q", c.SignUpPlan)
	}
	if b := c.ShareBonus; b != nil && (b.PerSignup < 1 || b.MonthlyCap < b.PerSignup) {
		return errors.New("shareBonus: perSignup must be at least 1, and monthlyCap at least perSignup")
	}
	keys := map[string]bool{}
	for i, k := range c.Keys {
		if err := upscale.ValidateKey(k.Key); err != nil {
			return fmt.Errorf("keys[%d].key: %w", i, err)
		}
		if keys[k.Key] {
			return fmt.Errorf("keys[%d].key: duplicate key", i)
		}
		if !accounts[k.Account] {
			return fmt.Errorf("keys[%d].account: unknown account %q", i, k.Account)
		}
		keys[k.Key] = true
	}
	return nil
}

// seed puts the file's plans, accounts and keys into the store. It can be
// run again with the same file and changes nothing: plans take the file's
// terms, but accounts that exist keep their balances (billing changes them
// through the admin subcommands), and keys that exist stay as they are,
// revoked ones included.
func (c fileConfig) seed(ctx context.Context, store *sqlstore.Store) error {
	for name, p := range c.Plans {
		if err := store.PutPlan(ctx, p.plan(name)); err != nil {
			return err
		}
	}
	for _, a := range c.Accounts {
		acct := upscale.Account{ID: a.ID, Plan: c.Plans[a.Plan].plan(a.Plan), Credits: a.Credits, ShareBonus: a.ShareBonus}
		if _, err := store.CreateAccount(ctx, acct); err != nil {
			return err
		}
	}
	for _, k := range c.Keys {
		err := store.AddKey(ctx, k.Key, k.Account)
		if errors.Is(err, upscale.ErrKeyConflict) {
			if _, authErr := store.Authenticate(ctx, k.Key); errors.Is(authErr, upscale.ErrUnauthorized) {
				continue // revoked in the database, by the file or an operator: it stays so
			}
		}
		if err != nil {
			return fmt.Errorf("key of account %q: %w", k.Account, err)
		}
		if !k.Revoked {
			continue
		}
		if err := store.RevokeKey(ctx, k.Key); err != nil && !errors.Is(err, upscale.ErrNotFound) {
			return err // ErrNotFound: revoked on an earlier run
		}
	}
	return nil
}

func (p filePlan) plan(name string) upscale.Plan {
	return upscale.Plan{Name: name, Paid: p.Paid, Unlimited: p.Unlimited, MonthlyImages: p.MonthlyImages, MaxFileBytes: p.MaxFileBytes}
}

// models are the config's networks and rules as the learned engine takes
// them.
func (c fileConfig) models() ([]onnx.Model, []onnx.Rule) {
	var models []onnx.Model
	for _, n := range c.Networks {
		models = append(models, onnx.Model{Name: n.Name, Param: n.Param, ONNX: n.ONNX, INT8: n.INT8, Published: n.Published, Tile: n.Tile})
	}
	var rules []onnx.Rule
	for _, r := range c.Rules {
		rule := onnx.Rule{Model: r.Network, ImageType: upscale.ImageType(r.ImageType), Scales: r.Scales}
		for _, d := range r.Denoise {
			rule.Denoise = append(rule.Denoise, upscale.Denoise(d))
		}
		rules = append(rules, rule)
	}
	return models, rules
}

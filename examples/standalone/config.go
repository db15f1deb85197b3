package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/upscalekit/upscale"
)

// fileConfig is the JSON file given with -config.
type fileConfig struct {
	FreeTierMaxFileBytes int64               `json:"freeTierMaxFileBytes"`
	Plans                map[string]filePlan `json:"plans"`
	Accounts             []fileAccount       `json:"accounts"`
	Keys                 []fileKey           `json:"keys"`
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
	return c, nil
}

func (c fileConfig) validate() error {
	if c.FreeTierMaxFileBytes < 0 {
		return errors.New("freeTierMaxFileBytes: cannot be negative")
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

// seed puts the file's accounts and keys into the stores.
func (c fileConfig) seed(ctx context.Context, keys *upscale.MemoryKeyStore, ledger *upscale.MemoryLedger) error {
	for _, a := range c.Accounts {
		p := c.Plans[a.Plan]
		plan := upscale.Plan{Name: a.Plan, Paid: p.Paid, Unlimited: p.Unlimited, MonthlyImages: p.MonthlyImages, MaxFileBytes: p.MaxFileBytes}
		if err := ledger.PutAccount(ctx, upscale.Account{ID: a.ID, Plan: plan, Credits: a.Credits, ShareBonus: a.ShareBonus}); err != nil {
			return err
		}
	}
	for _, k := range c.Keys {
		if err := keys.Add(ctx, k.Key, k.Account); err != nil {
			return err
		}
		if k.Revoked {
			if err := keys.Revoke(ctx, k.Key); err != nil {
				return err
			}
		}
	}
	return nil
}

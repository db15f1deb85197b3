// Package accountstest is the conformance suite for package accounts'
// stores, as upscaletest is the root package's: TestDirectory for an
// accounts.Directory, TestLinkStore for an accounts.LinkStore and
// TestSessionStore for an accounts.SessionStore. A backend's test calls
// each in a few lines; the in-memory defaults and sqlstore run them.
package accountstest

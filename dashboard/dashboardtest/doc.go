// Package dashboardtest is the conformance suite for the dashboard's
// stores, as upscaletest is the root package's: TestLinkStore for a
// dashboard.LinkStore and TestSessionStore for a dashboard.SessionStore.
// A backend's test calls each in a few lines; dashboard's in-memory
// stores and sqlstore run them. It lives apart from upscaletest so that
// backends of the root package's interfaces test without the dashboard's
// dependencies.
package dashboardtest

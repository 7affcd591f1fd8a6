package gateway

import (
	_ "embed"
	"net/http"
)

// dashboardHTML is the dashboard: one static page whose script reads the
// Admin API's cluster overview (GET /api/v1/filesystems/{fs}/overview)
// every few seconds, with the bearer token the user gives it (kept in the
// browser's local storage, or passed as #token=... in the URL). Query
// parameter fs picks the file system; the first one otherwise.
//
//go:embed dashboard/index.html
var dashboardHTML []byte

// serveDashboard serves the dashboard page; it holds no data, so it needs
// no token (the API calls it makes do).
func serveDashboard(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	w.Write(dashboardHTML)
}

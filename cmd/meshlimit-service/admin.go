package main

import (
	"net/http"
	"strings"

	"github.com/meshlimit/meshlimit/service"
)

// withAdmin serves the admin API (service.AdminPrefix) with admin and everything else with h.
func withAdmin(h, admin http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, service.AdminPrefix) {
			admin.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

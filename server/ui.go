package server

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/braid-hpc/braid/api"
)

// uiFiles is the dashboard: static HTML, CSS and JavaScript that read the
// control API with the credential the user gives in the page.
//
//go:embed ui
var uiFiles embed.FS

var uiHandler = func() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err)
	}
	return http.StripPrefix(api.PathUI, http.FileServerFS(sub))
}()

// getUI serves the dashboard's files. They are the same for everyone and
// hold no data, so they are open; the data they show comes from API
// requests that carry the user's credential. The headers keep the page
// from loading anything but its own files and the API, and from being
// framed by another site.
func (s *Server) getUI(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	uiHandler.ServeHTTP(w, r)
	return nil
}

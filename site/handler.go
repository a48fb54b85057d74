package site

import (
	"bytes"
	"html"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/convergehq/converge"
)

// csp is the Content-Security-Policy every response carries: the pages run
// only the site's own script, load only the site's own files and post
// nowhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'self'; frame-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'"

// Handler serves the site built in dir (by Build or Builder) read-only:
// "/" is index.html, directories are never listed, nothing outside dir is
// reachable, "/r/KIND/NAME" redirects to the resource's section on its
// page (ResourcePath) when the site has it, and every response says not to cache it (pages change as the
// store does) and carries a strict Content-Security-Policy. It serves what
// is on disk; rebuilding is the Builder's job.
func Handler(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		p := path.Clean("/" + r.URL.Path)
		if p == "/" {
			p = "/index.html"
		}
		if strings.HasPrefix(path.Base(p), ".") || strings.HasSuffix(p, ".tmp") {
			http.NotFound(w, r)
			return
		}
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			if to, ok := resourceRedirect(dir, p); ok {
				// Not http.Redirect: it resolves a relative target
				// against the path as this handler sees it, which a
				// prefix (http.StripPrefix) shortened.
				h.Set("Location", to)
				w.WriteHeader(http.StatusFound)
				return
			}
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || fi.IsDir() {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, p, fi.ModTime(), f)
	})
}

// resourceRedirect answers a path "/r/KIND/NAME" (no such file) with the
// link to that resource's section, relative to the path so the site may
// be served below any prefix; false when it is not such a path or the
// site has no such resource.
func resourceRedirect(dir, p string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) != 3 || parts[0] != "r" || parts[1] == "" || parts[2] == "" || strings.HasSuffix(parts[2], ".html") {
		return "", false
	}
	id := converge.NewID(parts[1], parts[2])
	page, _, _ := strings.Cut(ResourcePath(id), "#")
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(page)))
	if err != nil || !bytes.Contains(b, []byte(`<section class="res" id="`+html.EscapeString(anchor(id))+`"`)) {
		return "", false
	}
	return "../../" + ResourcePath(id), true
}

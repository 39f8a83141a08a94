package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string, header map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func TestDemoPageIsServedAtRoot(t *testing.T) {
	h := NewRouter(Config{})
	res := get(t, h, "/", nil)
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	for _, want := range []string{`src="/app.js"`, `href="/app.css"`, `id="editor"`, `id="people"`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if res := get(t, h, "/nope.js", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nope.js = %d, want 404", res.StatusCode)
	}
	if res := get(t, h, "/../routes.go", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /../routes.go = %d, want 404", res.StatusCode)
	}
}

// A router holds none of the bundle until it is asked for: a node that
// never serves the page does not pay for its megabytes.
func TestTheBundleIsReadOnlyWhenAskedFor(t *testing.T) {
	info, err := fs.Stat(static, "static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h := NewRouter(Config{})
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n >= uint64(info.Size())/4 {
		t.Fatalf("making a router allocated %d bytes; the bundle is %d", n, info.Size())
	}
	if res := get(t, h, "/app.js", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("GET /app.js = %d", res.StatusCode)
	}
}

func TestBundleIsGzippedForClientsThatAcceptIt(t *testing.T) {
	h := NewRouter(Config{})
	want, err := fs.ReadFile(static, "static/app.js")
	if err != nil {
		t.Fatal(err)
	}

	plain := get(t, h, "/app.js", nil)
	body, _ := io.ReadAll(plain.Body)
	if plain.Header.Get("Content-Encoding") != "" || !bytes.Equal(body, want) {
		t.Fatalf("without Accept-Encoding: encoding %q, %d bytes (want the %d plain bytes)", plain.Header.Get("Content-Encoding"), len(body), len(want))
	}
	if !strings.Contains(plain.Header.Get("Content-Type"), "javascript") {
		t.Errorf("Content-Type = %q", plain.Header.Get("Content-Type"))
	}

	zipped := get(t, h, "/app.js", map[string]string{"Accept-Encoding": "br, gzip;q=0.8"})
	if zipped.Header.Get("Content-Encoding") != "gzip" || zipped.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("with gzip accepted: Content-Encoding %q, Vary %q", zipped.Header.Get("Content-Encoding"), zipped.Header.Get("Vary"))
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	unzipped, _ := io.ReadAll(zr)
	if !bytes.Equal(unzipped, want) {
		t.Fatal("the gzipped bundle does not decompress to the bundle")
	}
	if n, _ := strconv.Atoi(zipped.Header.Get("Content-Length")); n == 0 || n >= len(want)/2 {
		t.Errorf("gzipped Content-Length %d for %d plain bytes", n, len(want))
	}
	if refused := get(t, h, "/app.js", map[string]string{"Accept-Encoding": "gzip;q=0"}); refused.Header.Get("Content-Encoding") != "" {
		t.Error("gzip;q=0 still got gzip")
	}

	// A reload revalidates and costs a 304.
	etag := zipped.Header.Get("ETag")
	again := get(t, h, "/app.js", map[string]string{"Accept-Encoding": "gzip", "If-None-Match": etag})
	if again.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match %s = %d, want 304", etag, again.StatusCode)
	}
	if etag == plain.Header.Get("ETag") {
		t.Error("the gzipped and plain bodies share an ETag")
	}
}

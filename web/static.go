package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// staticFiles serves the embedded demo page and its bundle. The bundle is
// large (Automerge's wasm is inlined), so text files are served gzipped to
// clients that accept it, compressed once on first request, and every file
// carries an ETag so that a reload costs a 304.
type staticFiles struct {
	files map[string]*staticFile
}

type staticFile struct {
	name  string
	data  []byte
	etag  string
	ctype string

	gzOnce sync.Once
	gz     []byte // nil if not worth compressing
}

// startTime is the Last-Modified of every embedded file: they change only
// with the binary.
var startTime = time.Now()

func newStaticFiles(fsys fs.FS) (*staticFiles, error) {
	s := &staticFiles{files: map[string]*staticFile{}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = http.DetectContentType(data)
		}
		s.files["/"+p] = &staticFile{name: p, data: data, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: ctype}
		return nil
	})
	return s, err
}

func (s *staticFiles) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := path.Clean("/" + r.URL.Path)
	if p == "/" {
		p = "/index.html"
	}
	f, ok := s.files[p]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("Cache-Control", "no-cache") // revalidate: names are not content-hashed
	h.Set("Vary", "Accept-Encoding")
	body, etag := f.data, f.etag
	if acceptsGzip(r) {
		if gz := f.gzipped(); gz != nil {
			h.Set("Content-Encoding", "gzip")
			body, etag = gz, strings.TrimSuffix(f.etag, `"`)+`-gz"`
			// ServeContent leaves the length of an encoded body unset;
			// ranges of a compressed body are not offered.
			h.Set("Content-Length", strconv.Itoa(len(gz)))
			r.Header.Del("Range")
		}
	}
	h.Set("ETag", etag)
	http.ServeContent(w, r, f.name, startTime, bytes.NewReader(body))
}

// gzipped returns the file compressed, or nil for files that do not shrink
// (images) or are too small to bother.
func (f *staticFile) gzipped() []byte {
	f.gzOnce.Do(func() {
		if len(f.data) < 1024 || !compressible(f.ctype) {
			return
		}
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.DefaultCompression)
		zw.Write(f.data)
		zw.Close()
		if b.Len() < len(f.data) {
			f.gz = b.Bytes()
		}
	})
	return f.gz
}

func compressible(ctype string) bool {
	return strings.HasPrefix(ctype, "text/") || strings.Contains(ctype, "javascript") || strings.Contains(ctype, "json")
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(params, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

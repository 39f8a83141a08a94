package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
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
// clients that accept it, and every file carries an ETag so that a reload
// costs a 304. A file is read on its first request, not at start: a node
// that never serves the page holds none of it, and one that does holds
// only the compressed copy (the plain bytes are read from the binary each
// time, as they are sent).
type staticFiles struct {
	fsys  fs.FS
	files map[string]*staticFile
}

type staticFile struct {
	name string

	mu    sync.Mutex
	ready bool // read: etag, ctype and gz are set
	etag  string
	ctype string
	gz    []byte // nil if not worth compressing
}

// startTime is the Last-Modified of every embedded file: they change only
// with the binary.
var startTime = time.Now()

func newStaticFiles(fsys fs.FS) (*staticFiles, error) {
	s := &staticFiles{fsys: fsys, files: map[string]*staticFile{}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		s.files["/"+p] = &staticFile{name: p}
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
	if err := f.prepare(s.fsys); err != nil {
		http.Error(w, "cannot read "+f.name, http.StatusInternalServerError)
		return
	}
	gzipped := f.gz != nil && acceptsGzip(r)
	var body io.ReadSeeker = bytes.NewReader(f.gz)
	if !gzipped {
		// The plain bytes are the file itself: an embedded file seeks.
		file, err := s.fsys.Open(f.name)
		if err != nil {
			http.Error(w, "cannot read "+f.name, http.StatusInternalServerError)
			return
		}
		defer file.Close()
		rs, ok := file.(io.ReadSeeker)
		if !ok {
			http.Error(w, "cannot seek "+f.name, http.StatusInternalServerError)
			return
		}
		body = rs
	}
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("Cache-Control", "no-cache") // revalidate: names are not content-hashed
	h.Set("Vary", "Accept-Encoding")
	h.Set("ETag", f.etag)
	if gzipped {
		h.Set("Content-Encoding", "gzip")
		h.Set("ETag", strings.TrimSuffix(f.etag, `"`)+`-gz"`)
		// ServeContent leaves the length of an encoded body unset;
		// ranges of a compressed body are not offered.
		h.Set("Content-Length", strconv.Itoa(len(f.gz)))
		r.Header.Del("Range")
	}
	http.ServeContent(w, r, f.name, startTime, body)
}

// prepare reads the file on its first request: its ETag, its type, and
// its compressed copy if it is text of 1 KiB or more that shrinks. A read
// that fails is tried again at the next request.
func (f *staticFile) prepare(fsys fs.FS) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ready {
		return nil
	}
	data, err := fs.ReadFile(fsys, f.name)
	if err != nil {
		return err
	}
	f.ready = true
	sum := sha256.Sum256(data)
	f.etag = `"` + hex.EncodeToString(sum[:8]) + `"`
	f.ctype = mime.TypeByExtension(path.Ext(f.name))
	if f.ctype == "" {
		f.ctype = http.DetectContentType(data)
	}
	if len(data) < 1024 || !compressible(f.ctype) {
		return nil
	}
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.DefaultCompression)
	zw.Write(data)
	zw.Close()
	if b.Len() < len(data) {
		f.gz = bytes.Clone(b.Bytes())
	}
	return nil
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

package web

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
)

// OpenAPI is the description of the REST API (openapi.yaml, OpenAPI 3.1),
// kept beside the routes; the package's tests fail when a route and the
// description disagree, or a response the handlers send does not match
// it.
//
//go:embed openapi.yaml
var OpenAPI []byte

// openAPIJSON is the description as JSON, made once.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
})

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	b, err := openAPIJSON()
	if err != nil {
		// The description is fixed at build time, and the tests load it.
		writeError(w, http.StatusInternalServerError, "the API's description does not load: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

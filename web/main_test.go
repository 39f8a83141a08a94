package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them, or
// if any API response they received does not match the API's
// description (openapi.yaml): every request the tests make with the
// default client is checked. The tests' HTTP client keeps idle
// connections to the test servers, which belong to the client, not to
// the code under test: they are closed first.
func TestMain(m *testing.M) {
	v, err := newResponseChecker()
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapi.yaml:", err)
		os.Exit(1)
	}
	http.DefaultClient.Transport = v
	code := m.Run()
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if bad := v.failures(); len(bad) > 0 {
			fmt.Fprintf(os.Stderr, "responses that do not match openapi.yaml (%d):\n%s\n", len(bad), strings.Join(bad, "\n"))
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// loadDescription loads openapi.yaml for a test.
func loadDescription(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return doc
}

// responseChecker is a client transport that checks every response to
// a request under /api/ against the description: its route, its status
// and its body (not a stream's); and every request the API accepted (a
// 2xx answer): what the server takes, the description allows.
type responseChecker struct {
	router routers.Router

	mu  sync.Mutex // guards bad
	bad []string
}

func newResponseChecker() (*responseChecker, error) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &responseChecker{router: router}, nil
}

func (c *responseChecker) RoundTrip(req *http.Request) (*http.Response, error) {
	var sent []byte
	if req.Body != nil && req.GetBody != nil {
		b, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		sent, _ = io.ReadAll(b)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !strings.HasPrefix(req.URL.Path, "/api/") {
		return resp, err
	}
	err = c.check(req, resp)
	if err == nil && resp.StatusCode/100 == 2 {
		err = c.checkRequest(req, sent)
	}
	if err != nil {
		c.mu.Lock()
		c.bad = append(c.bad, fmt.Sprintf("%s %s → %d: %v", req.Method, req.URL.Path, resp.StatusCode, err))
		c.mu.Unlock()
	}
	return resp, nil
}

// check checks a response against the description; it leaves the body
// for the caller to read.
func (c *responseChecker) check(req *http.Request, resp *http.Response) error {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return nil // a path or method the API does not have, answered so
		}
		return fmt.Errorf("not described: %w", err)
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		opts.ExcludeResponseBody = true // a stream: its body is the test's to read
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                opts,
	}
	if !opts.ExcludeResponseBody {
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return nil // the test sees the same error
		}
		in.SetBodyBytes(body)
	}
	return openapi3filter.ValidateResponse(context.Background(), in)
}

// checkRequest checks a request the API accepted, of body sent, against
// the description.
func (c *responseChecker) checkRequest(req *http.Request, sent []byte) error {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("not described: %w", err)
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(sent))
	// The API reads a body sent without a Content-Type as the one type
	// its route takes (info.description says so).
	if body := route.Operation.RequestBody; r.Header.Get("Content-Type") == "" && body != nil && len(body.Value.Content) == 1 {
		for ctype := range body.Value.Content {
			r.Header.Set("Content-Type", ctype)
		}
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		return fmt.Errorf("a request accepted that the description does not allow: %w", err)
	}
	return nil
}

func (c *responseChecker) failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.bad)
}

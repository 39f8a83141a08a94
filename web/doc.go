// Package web serves Tandem's HTTP surface: the WebSocket endpoint, health
// and metrics, and the pages a browser sees. It routes; the work happens in
// the packages it is given.
//
// The API (/api) is bounded per remote address: requests by a rate
// (RequestLimits, requests.go), a request's body by a read deadline, and
// the long-lived streams (presence watch, notifications) by their number
// and the users they follow (StreamLimits, streams.go). A stream ends when
// its token expires. What is refused is answered with a status and a
// message that says why, and counted in tandem_http_refused_total.
//
// The document API (documents.go, edits.go) reads a document's content,
// saved form or changes, and writes a backend's changes or JSON edits
// through Documents (the hub) as a server-side peer's: bodies bounded in
// bytes, depth, edits and ops; what a request holds of a whole document
// charged before it reads to DocumentLimits.ReadBytes (readbudget.go). openapi.yaml describes the whole API; the
// package's tests hold every route and every response they see to it.
package web

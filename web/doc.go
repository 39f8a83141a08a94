// Package web serves Tandem's HTTP surface: the WebSocket endpoint, health
// and metrics, and the pages a browser sees. It routes; the work happens in
// the packages it is given.
package web

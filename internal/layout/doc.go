// Package layout has no code: its test checks the shape of the tree that
// cmd/tandem/ARCHITECTURE.md describes. Imports go one way, from the
// binaries down to the core (cmd → web → transport → doc, awareness →
// helpers), never across a level; every package has a doc.go, and the
// files a doc.go names exist. Files are cut by concept, not by length, so
// the test sets no size.
package layout

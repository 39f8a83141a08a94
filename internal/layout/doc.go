// Package layout has no code: its test checks the shape of the tree that
// the README's Architecture section describes. Imports go one way, from
// the binaries down to the core (cmd → web → transport → doc, awareness
// → helpers); no file grows past about 400 lines without a stated reason;
// every package has a doc.go, and the files a doc.go names exist.
package layout

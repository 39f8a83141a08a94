// Package smallmap holds a map for the many small sets a server keeps per
// connection: the documents one connection has open, the connections of
// one user. Nearly all of them hold one or two entries, and a Go map
// costs about 200 bytes at its first entry; a Map keeps up to eight
// entries in a slice (16 to 24 bytes each) and becomes a map past that,
// so a large one stays fast.
//
// Files: smallmap.go, the Map.
package smallmap

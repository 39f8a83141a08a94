// Package amtest builds automerge change chunks by hand, op by op, for
// tests of what a server does with changes automerge itself would never
// write: ops that name objects, elements or predecessors a document
// lacks, marks without their ends, and so on. It writes what automerge's
// decoder reads; it does not check what it is given.
package amtest

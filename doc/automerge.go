package doc

import "github.com/automerge/automerge-go"

// loadChanges adds saved changes (automerge.SaveChanges), or a saved
// document, to d.
//
// It exists so that nothing here calls Doc.Apply with the changes
// automerge.LoadChanges returns: those share one C result, and Apply
// concatenates the result of each change onto the list it builds, so n
// changes make a list of n² items, while the Go garbage collector may free
// the intermediate lists during the concatenation. Under load that crashed
// a node (SIGSEGV in AMresultCat, applying 516 changes that another node
// sent after Redis came back; TestManyRemoteChangesAtOnce). LoadIncremental
// reads the same bytes in one call.
func loadChanges(d *automerge.Doc, data []byte) error {
	return d.LoadIncremental(data)
}

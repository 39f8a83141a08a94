// Package cmalloc tunes the C allocator beneath automerge.
//
// What automerge holds in a node (a document stored in an earlier
// version's format, while it is read) lives in its C heap, which glibc's
// malloc serves. Two of its defaults cost a node more memory than that:
//
//   - It keeps up to eight arenas per core, one for each thread that
//     allocated while the others were busy. Memory freed in one arena
//     serves only that arena, so a burst of joins spread over many
//     threads leaves free space in each.
//   - It gives memory back only from the top of an arena. Documents
//     that leave memory leave free pages between those that stay.
//
// LimitArenas caps the arenas; Trim returns free pages inside them to the
// system, as the collector's tuner does for Go's heap (internal/gctune)
// once a node goes quiet; Stats reads what the heap holds, for metrics.
// On other C libraries, or without cgo, they do nothing and say so.
//
// Every function is safe for concurrent use.
//
// Files: cmalloc_glibc.go, the calls into glibc; cmalloc_other.go, the
// stand-ins elsewhere.
package cmalloc

//go:build linux && cgo

package cmalloc

/*
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
static int cm_limit_arenas(int n) { return mallopt(M_ARENA_MAX, n); }
static int cm_trim(void) { return malloc_trim(0); }
static int cm_stats(size_t *in_use, size_t *free_bytes) {
#if __GLIBC__ > 2 || __GLIBC_MINOR__ >= 33
	struct mallinfo2 m = mallinfo2();
#else
	struct mallinfo m = mallinfo(); // int fields: wraps past 2 GiB
#endif
	*in_use = (size_t)m.uordblks + (size_t)m.hblkhd;
	*free_bytes = (size_t)m.fordblks;
	return 1;
}
#else
static int cm_limit_arenas(int n) { return 0; }
static int cm_trim(void) { return 0; }
static int cm_stats(size_t *in_use, size_t *free_bytes) { return 0; }
#endif
*/
import "C"

// LimitArenas caps malloc's arenas at n. It reports false where the C
// library is not glibc, or it refused.
func LimitArenas(n int) bool {
	return n > 0 && C.cm_limit_arenas(C.int(n)) == 1
}

// Trim gives the free pages of every arena back to the system, and
// reports whether there were any. It walks the arenas' free lists with
// each arena locked in turn: call it when the node is quiet.
func Trim() bool {
	return C.cm_trim() == 1
}

// Stats reports the bytes of the C heap in use and those free within its
// arenas (trimmed or not); ok is false where they cannot be read.
func Stats() (inUse, free uint64, ok bool) {
	var u, f C.size_t
	if C.cm_stats(&u, &f) != 1 {
		return 0, 0, false
	}
	return uint64(u), uint64(f), true
}

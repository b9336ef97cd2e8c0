package profmalloc

/*
#include <stdlib.h>
#include <string.h>

// 48 MiB taken and freed: the C heap's peak is in this function.
__attribute__((noinline)) void pm_go_test_peak_site(void)
{
	enum { BLOCKS = 768, SIZE = 64 << 10 };
	static void *v[BLOCKS];
	for (int i = 0; i < BLOCKS; i++) {
		v[i] = malloc(SIZE);
		if (v[i]) memset(v[i], 0x3c, SIZE);
	}
	for (int i = 0; i < BLOCKS; i++) free(v[i]);
}
*/
import "C"

import "unsafe"

// cAlloc and cFree give this package's tests C heap blocks (cgo is not
// allowed in _test.go files).
func cAlloc(n int) unsafe.Pointer { return C.malloc(C.size_t(n)) }
func cFree(p unsafe.Pointer)      { C.free(p) }
func cPeak()                      { C.pm_go_test_peak_site() }

package profmalloc

// #include <stdlib.h>
import "C"

import "unsafe"

// cAlloc and cFree give this package's tests C heap blocks (cgo is not
// allowed in _test.go files).
func cAlloc(n int) unsafe.Pointer { return C.malloc(C.size_t(n)) }
func cFree(p unsafe.Pointer)      { C.free(p) }

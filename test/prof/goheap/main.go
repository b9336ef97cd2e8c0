// goheap writes a Go heap profile (runtime/pprof) to the file named by its
// argument; test_prof merges it with a profmalloc profile in one
// `go tool pprof` session, as a cgo user would.
package main

import (
	"os"
	"runtime"
	"runtime/pprof"
)

var keep [][]byte

func main() {
	for i := 0; i < 1000; i++ {
		keep = append(keep, make([]byte, 4096))
	}
	// the heap profile shows the heap as of the last GC: without one
	// main.main was sometimes missing (test_prof: test_go_pprof_shows_sites)
	runtime.GC()
	f, _ := os.Create(os.Args[1])
	pprof.Lookup("heap").WriteTo(f, 0)
	f.Close()
}

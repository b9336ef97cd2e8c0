// example is a service whose C side leaks: PUT /put?key=K stores the
// request body in a C cache (cache.c), and replacing a key's value loses
// the old one.  Its Go side keeps the last requests in a Go slice.  It
// serves net/http/pprof's Go profiles and profmalloc's C ones side by
// side:
//
//	go run . -addr 127.0.0.1:6060 &
//	go tool pprof -top http://127.0.0.1:6060/debug/pprof/cheap
//
// doc/cgo.md walks from the symptom to the leaking line.
package main

/*
#cgo CFLAGS: -O1 -g -fno-omit-frame-pointer
#include <stdlib.h>
#include "cache.h"
*/
import "C"

import (
	"flag"
	"io"
	"log"
	"net/http"
	_ "net/http/pprof"
	"sync"
	"unsafe"

	"profmalloc.dev/bindings/go/profmalloc"
)

var (
	mu     sync.Mutex
	recent [][]byte // the last 256 request bodies, on the Go heap
)

//go:noinline
func remember(b []byte) {
	mu.Lock()
	defer mu.Unlock()
	c := make([]byte, len(b))
	copy(c, b)
	recent = append(recent, c)
	if len(recent) > 256 {
		recent = recent[1:]
	}
}

//go:noinline
func store(key string, value []byte) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var p *C.char
	if len(value) > 0 {
		p = (*C.char)(unsafe.Pointer(&value[0]))
	}
	C.cache_put(ck, p, C.size_t(len(value)))
}

func handlePut(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		http.Error(w, "key missing", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remember(body)
	store(key, body)
	io.WriteString(w, "ok\n")
}

func newMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/put", handlePut)
	mux.Handle("/debug/pprof/", http.DefaultServeMux) // net/http/pprof's Go profiles
	profmalloc.Register(mux)                          // cheap, callocs, merged-heap, cstats
	return mux
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6060", "listen address")
	flag.Parse()
	log.Printf("serving on http://%s/ (profiles under /debug/pprof/)", *addr)
	log.Fatal(http.ListenAndServe(*addr, newMux()))
}

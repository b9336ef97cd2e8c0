package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"profmalloc.dev/bindings/go/profmalloc"
)

func init() {
	runtime.MemProfileRate = 4096
	profmalloc.SetSampleRate(4096)
}

// load puts 2000 values of 4 KiB under 50 keys: 1950 of them leak.
func load(t *testing.T, url string) {
	value := bytes.Repeat([]byte("v"), 4096)
	for i := 0; i < 2000; i++ {
		r, err := http.Post(fmt.Sprintf("%s/put?key=k%d", url, i%50), "application/octet-stream", bytes.NewReader(value))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}

// pprofTop runs go tool pprof -top on url and returns its output.
func pprofTop(t *testing.T, url string, extra ...string) string {
	args := append([]string{"tool", "pprof", "-top", "-sample_index=inuse_space"}, extra...)
	cmd := exec.Command("go", append(args, url)...)
	cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	return string(out)
}

// flatTop returns the function with the most flat in-use bytes.
func flatTop(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "flat%") && i+1 < len(lines) {
			f := strings.Fields(lines[i+1])
			return f[len(f)-1]
		}
	}
	return ""
}

func TestLeakFoundThroughHandler(t *testing.T) {
	srv := httptest.NewServer(newMux())
	defer srv.Close()
	before := profmalloc.Stats().InUse
	load(t, srv.URL)
	grown := profmalloc.Stats().InUse - before
	if grown < 1950*4096 {
		t.Fatalf("the C heap grew by %d bytes, not by the leak's %d", grown, 1950*4096)
	}
	out := pprofTop(t, srv.URL+"/debug/pprof/cheap")
	if top := flatTop(out); top != "copy_value" {
		t.Fatalf("the top C allocator is %q, not copy_value:\n%s", top, out)
	}
	if !strings.Contains(out, "cache_put") {
		t.Fatalf("cache_put is not in the C heap profile:\n%s", out)
	}
	// the C stacks continue into Go (src/prof_unwind_go.c): the handler
	// that called cache_put is on copy_value's stack.  Go functions named
	// by the process (net/http/pprof's symbol handler): go test links its
	// binary with -s -w, and pprof misnames Go code in such a binary.
	traces := pprofTop(t, srv.URL+"/debug/pprof/cheap", "-symbolize=remote", "-focus=copy_value", "-cum", "-nodecount=100")
	for _, fn := range []string{"runtime.cgocall", "._Cfunc_cache_put", ".store", ".handlePut", "net/http.HandlerFunc.ServeHTTP"} {
		if !strings.Contains(traces, fn) {
			t.Fatalf("%s is not on copy_value's stack:\n%s", fn, traces)
		}
	}
	// what net/http/pprof alone shows: the Go heap, without the leak
	goOut := pprofTop(t, srv.URL+"/debug/pprof/heap?gc=1")
	if strings.Contains(goOut, "copy_value") {
		t.Fatalf("the Go heap profile shows C functions:\n%s", goOut)
	}
}

func TestMergedProfileHasGoAndC(t *testing.T) {
	srv := httptest.NewServer(newMux())
	defer srv.Close()
	load(t, srv.URL)
	out := pprofTop(t, srv.URL+"/debug/pprof/merged-heap?gc=1", "-nodecount=100")
	for _, fn := range []string{"example.handlePut", "copy_value", "cache_put"} {
		if !strings.Contains(out, fn) {
			t.Fatalf("%s is not in the merged profile:\n%s", fn, out)
		}
	}
	cOnly := pprofTop(t, srv.URL+"/debug/pprof/merged-heap", "-tagfocus=heap=c", "-nodecount=100")
	if strings.Contains(cOnly, "example.handlePut") || !strings.Contains(cOnly, "copy_value") {
		t.Fatalf("-tagfocus=heap=c does not select the C heap:\n%s", cOnly)
	}
	goOnly := pprofTop(t, srv.URL+"/debug/pprof/merged-heap", "-tagfocus=heap=go", "-nodecount=100")
	if !strings.Contains(goOnly, "example.handlePut") || strings.Contains(goOnly, "copy_value") {
		t.Fatalf("-tagfocus=heap=go does not select the Go heap:\n%s", goOnly)
	}
}

// Package profmalloc serves the C heap of a Go program that links C (cgo)
// the way net/http/pprof serves the Go heap: the profile of every
// allocation the C side makes through malloc, sampled by profmalloc, at
// /debug/pprof/cheap and /debug/pprof/callocs, the C heap at its peak of
// live bytes at /debug/pprof/cpeak, and the Go and C heaps together in
// one profile at /debug/pprof/merged-heap.
//
// The program must allocate through profmalloc: this package links it
// (-lprofmalloc), so a Go binary built with it has profmalloc's malloc.
//
//	import (
//		_ "net/http/pprof"
//		"profmalloc.dev/bindings/go/profmalloc"
//	)
//	profmalloc.Register(http.DefaultServeMux)
//
//	go tool pprof http://localhost:6060/debug/pprof/cheap
//
// See doc/cgo.md in the profmalloc sources for a walk from a leak's
// symptom to the C line that leaks.
package profmalloc

/*
#cgo LDFLAGS: -lprofmalloc
#include <profmalloc.h>
#include <stdlib.h>
*/
import "C"

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// AllocatorStats are the C allocator's exact totals at one moment
// (profmalloc.h's profmalloc_stats_t).
type AllocatorStats struct {
	InUse            uint64 // bytes in blocks the program holds
	Requested        uint64 // bytes asked for, of InUse
	Mapped           uint64 // address space taken from the OS
	ResidentEstimate uint64 // Mapped - Released
	ThreadCache      uint64 // free blocks in per-thread caches
	CentralCache     uint64 // free blocks in central lists
	Fragmentation    uint64 // unused tails of small-object spans
	PageheapFree     uint64 // free pages still resident
	Released         uint64 // free pages returned to the OS
	Metadata         uint64 // spans, page map, sample records
	Threads          uint64 // live thread caches
	LockContention   uint64 // lock acquisitions that had to wait
	SampleRate       uint64 // mean bytes between samples
	SamplesLive      uint64 // sampled blocks not yet freed
}

// Stats returns the C allocator's statistics.
func Stats() AllocatorStats {
	var s C.profmalloc_stats_t
	C.profmalloc_get_stats(&s)
	return AllocatorStats{
		InUse: uint64(s.in_use), Requested: uint64(s.requested), Mapped: uint64(s.mapped),
		ResidentEstimate: uint64(s.resident_estimate), ThreadCache: uint64(s.thread_cache),
		CentralCache: uint64(s.central_cache), Fragmentation: uint64(s.fragmentation),
		PageheapFree: uint64(s.pageheap_free), Released: uint64(s.released),
		Metadata: uint64(s.metadata), Threads: uint64(s.threads),
		LockContention: uint64(s.lock_contention), SampleRate: uint64(s.sample_rate),
		SamplesLive: uint64(s.samples_live),
	}
}

// SetSampleRate sets the mean number of bytes between sampled C
// allocations (PROFMALLOC_SAMPLE_RATE; 1 records every allocation, 0
// stops sampling), as runtime.MemProfileRate does for Go's heap.
func SetSampleRate(bytes int) {
	if bytes < 0 {
		bytes = 0
	}
	C.profmalloc_set_sample_rate(C.size_t(bytes))
}

// dump returns the C heap's profile in profmalloc's format (0: gzip'd
// profile.proto, 1: the legacy text), read through a pipe.
func dump(format C.int) ([]byte, error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return nil, err
	}
	r := os.NewFile(uintptr(fds[0]), "profmalloc")
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		r.Close()
		done <- result{b, err}
	}()
	rc, errno := C.profmalloc_dump_fd(C.int(fds[1]), format)
	syscall.Close(fds[1])
	res := <-done
	if rc != 0 {
		return nil, fmt.Errorf("profmalloc: dump: %w", errno)
	}
	return res.b, res.err
}

// WriteHeapProfile writes the C heap's profile (gzip'd profile.proto, in
// the layout of Go's heap profile) to w.
func WriteHeapProfile(w io.Writer) error {
	b, err := dump(0)
	if err == nil {
		_, err = w.Write(b)
	}
	return err
}

// dumpPeak returns the profile at the C heap's peak (profmalloc_dump_peak,
// format 0 or 1), which the library writes only to a path: a file in a
// directory of its own, removed after it is read.
func dumpPeak(format int) ([]byte, error) {
	dir, err := os.MkdirTemp("", "profmalloc-peak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	name := "peak.pb.gz"
	if format == 1 {
		name = "peak.heap" // the legacy text, chosen by the name
	}
	path := C.CString(dir + "/" + name)
	defer C.free(unsafe.Pointer(path))
	if rc, errno := C.profmalloc_dump_peak(path); rc != 0 {
		return nil, fmt.Errorf("profmalloc: dump peak: %w", errno)
	}
	return os.ReadFile(dir + "/" + name)
}

func cHeap() (*profile, error) {
	b, err := dump(0)
	if err != nil {
		return nil, err
	}
	return parseProfile(b)
}

// MergedHeap writes one profile holding the Go heap (runtime/pprof) and
// the C heap, so that one pprof view shows both.  Each sample has the
// label heap=go or heap=c (go tool pprof -tagfocus=heap=c).
func MergedHeap(w io.Writer) error {
	var gobuf bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&gobuf, 0); err != nil {
		return err
	}
	g, err := parseProfile(gobuf.Bytes())
	if err != nil {
		return fmt.Errorf("profmalloc: Go heap: %w", err)
	}
	c, err := cHeap()
	if err != nil {
		return err
	}
	m, err := merge(g, c)
	if err != nil {
		return err
	}
	return m.marshal(w)
}

// merge appends c's samples to g's.  Both are heap profiles with the same
// four sample types (Go's order: alloc_objects, alloc_space,
// inuse_objects, inuse_space), values already scaled to estimates.
func merge(g, c *profile) (*profile, error) {
	if len(g.SampleTypes) != len(c.SampleTypes) {
		return nil, errors.New("profmalloc: the Go and C heap profiles have different sample types")
	}
	for i := range g.SampleTypes {
		if g.SampleTypes[i] != c.SampleTypes[i] {
			return nil, errors.New("profmalloc: the Go and C heap profiles have different sample types")
		}
	}
	for _, s := range g.Samples {
		s.Labels = append(s.Labels, label{Key: "heap", Str: "go"})
	}
	for _, s := range c.Samples {
		s.Labels = append(s.Labels, label{Key: "heap", Str: "c"})
	}
	// one mapping per address range: Go's (first, the main binary) wins
	type rng struct{ start, limit uint64 }
	have := map[rng]*mapping{}
	for _, m := range g.Mappings {
		have[rng{m.Start, m.Limit}] = m
	}
	for _, m := range c.Mappings {
		if old := have[rng{m.Start, m.Limit}]; old != nil {
			for _, l := range c.Locations {
				if l.Mapping == m {
					l.Mapping = old
				}
			}
			continue
		}
		g.Mappings = append(g.Mappings, m)
	}
	g.Samples = append(g.Samples, c.Samples...)
	g.Locations = append(g.Locations, c.Locations...)
	g.Functions = append(g.Functions, c.Functions...)
	g.Comments = append(g.Comments, c.Comments...)
	if c.TimeNanos > g.TimeNanos {
		g.TimeNanos = c.TimeNanos
	}
	return g, nil
}

// delta returns p1 - p0, matching samples by their stacks' addresses and
// labels, as net/http/pprof does for ?seconds=N; unchanged samples go.
func delta(p0, p1 *profile) *profile {
	key := func(s *sample) string {
		var b bytes.Buffer
		for _, l := range s.Locs {
			fmt.Fprintf(&b, "%x,", l.Address)
		}
		for _, l := range s.Labels {
			fmt.Fprintf(&b, "|%q=%q:%d%q", l.Key, l.Str, l.Num, l.NumUnit)
		}
		return b.String()
	}
	old := map[string]*sample{}
	for _, s := range p0.Samples {
		old[key(s)] = s
	}
	var out []*sample
	for _, s := range p1.Samples {
		changed := false
		if o := old[key(s)]; o != nil {
			for i := range s.Values {
				if i < len(o.Values) {
					s.Values[i] -= o.Values[i]
				}
			}
		}
		for _, v := range s.Values {
			changed = changed || v != 0
		}
		if changed {
			out = append(out, s)
		}
	}
	p1.Samples = out
	p1.DurationNanos = p1.TimeNanos - p0.TimeNanos
	return p1
}

func serveError(w http.ResponseWriter, status int, txt string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Go-Pprof", "1")
	w.Header().Del("Content-Disposition")
	w.WriteHeader(status)
	fmt.Fprintln(w, txt)
}

// serve answers one of the paths: which is "cheap", "callocs",
// "cpeak" or "merged-heap".
func serve(w http.ResponseWriter, r *http.Request, which string) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	debug, _ := strconv.Atoi(r.FormValue("debug"))
	secStr := r.FormValue("seconds")
	if debug != 0 && secStr == "" {
		if which == "merged-heap" {
			serveError(w, http.StatusBadRequest, "merged-heap has no legacy text; use /debug/pprof/heap?debug=1 and /debug/pprof/cheap?debug=1")
			return
		}
		var b []byte
		var err error
		if which == "cpeak" {
			b, err = dumpPeak(1)
		} else {
			b, err = dump(1)
		}
		if err != nil {
			serveError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(b)
		return
	}
	if which == "cpeak" && secStr != "" {
		// a peak is one moment: there is no change over seconds to show
		serveError(w, http.StatusBadRequest, `the peak profile takes no "seconds"`)
		return
	}
	take := func() (*profile, error) {
		if which == "cpeak" {
			b, err := dumpPeak(0)
			if err != nil {
				return nil, err
			}
			return parseProfile(b)
		}
		if which == "merged-heap" {
			var b bytes.Buffer
			if err := MergedHeap(&b); err != nil {
				return nil, err
			}
			return parseProfile(b.Bytes())
		}
		return cHeap()
	}
	var p *profile
	var err error
	name := which
	if secStr != "" {
		sec, perr := strconv.ParseInt(secStr, 10, 64)
		if perr != nil || sec <= 0 {
			serveError(w, http.StatusBadRequest, `invalid value for "seconds"`)
			return
		}
		if debug != 0 {
			serveError(w, http.StatusBadRequest, "seconds and debug params are incompatible")
			return
		}
		p0, err := take()
		if err != nil {
			serveError(w, http.StatusInternalServerError, err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(sec)*time.Second)
		<-ctx.Done()
		cancel()
		if r.Context().Err() != nil {
			serveError(w, http.StatusRequestTimeout, "client went away")
			return
		}
		if p, err = take(); err == nil {
			p = delta(p0, p)
		}
		name += "-delta"
	} else {
		p, err = take()
	}
	if err != nil {
		serveError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if which == "callocs" {
		p.DefaultSampleType = "alloc_space"
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, name))
	p.marshal(w)
}

// Handler serves the C heap: the request's last path element picks
// cheap (in-use view), callocs (alloc_space view), cpeak (the C heap at
// its peak of live bytes so far) or merged-heap (the Go and C heaps in
// one profile); cstats answers Stats as text.  The query parameters are
// net/http/pprof's: debug=1 (legacy text), gc (ignored for the C heap),
// seconds=N (the change over N seconds; not for cpeak, a single moment).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		i := len(path)
		for i > 0 && path[i-1] != '/' {
			i--
		}
		switch name := path[i:]; name {
		case "cheap", "callocs", "cpeak", "merged-heap":
			if name == "merged-heap" && r.FormValue("gc") != "" {
				runtime.GC()
			}
			serve(w, r, name)
		case "cstats":
			s := Stats()
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintf(w, "%+v\n", s)
		default:
			http.NotFound(w, r)
		}
	})
}

// Register mounts Handler at /debug/pprof/cheap, /debug/pprof/callocs,
// /debug/pprof/cpeak, /debug/pprof/merged-heap and /debug/pprof/cstats on
// mux, beside
// net/http/pprof's /debug/pprof/ paths.
func Register(mux *http.ServeMux) {
	h := Handler()
	for _, p := range []string{"cheap", "callocs", "cpeak", "merged-heap", "cstats"} {
		mux.Handle("/debug/pprof/"+p, h)
	}
}

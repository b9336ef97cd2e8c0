package profmalloc

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func init() { runtime.MemProfileRate = 1 }

var kept [][]byte

//go:noinline
func goLeakForTest() {
	for i := 0; i < 100; i++ {
		kept = append(kept, make([]byte, 10000))
	}
}

const goLeakName = "profmalloc.dev/bindings/go/profmalloc.goLeakForTest"

func names(p *profile, filter func(*sample) bool) map[string]bool {
	out := map[string]bool{}
	for _, s := range p.Samples {
		if filter != nil && !filter(s) {
			continue
		}
		for _, l := range s.Locs {
			for _, ln := range l.Lines {
				out[ln.Fn.Name] = true
			}
		}
	}
	return out
}

func heapLabel(s *sample) string {
	for _, l := range s.Labels {
		if l.Key == "heap" {
			return l.Str
		}
	}
	return ""
}

func TestProtoRoundTrip(t *testing.T) {
	goLeakForTest()
	runtime.GC()
	var b bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&b, 0); err != nil {
		t.Fatal(err)
	}
	p, err := parseProfile(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := p.marshal(&out); err != nil {
		t.Fatal(err)
	}
	q, err := parseProfile(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Samples) != len(p.Samples) || len(q.Locations) != len(p.Locations) ||
		len(q.Mappings) != len(p.Mappings) || q.PeriodType != p.PeriodType || q.Period != p.Period {
		t.Fatalf("round trip changed the profile: %d/%d samples, %d/%d locations",
			len(q.Samples), len(p.Samples), len(q.Locations), len(p.Locations))
	}
	for i := range p.Samples {
		for j := range p.Samples[i].Values {
			if p.Samples[i].Values[j] != q.Samples[i].Values[j] {
				t.Fatalf("sample %d value %d: %d became %d", i, j, p.Samples[i].Values[j], q.Samples[i].Values[j])
			}
		}
	}
	if !names(q, nil)[goLeakName] {
		t.Fatal("profmalloc.goLeakForTest is not in the Go heap profile after a round trip")
	}
	if _, err := parseProfile([]byte{0x0a, 0x05, 0x01}); err == nil {
		t.Fatal("a truncated message was accepted")
	}
}

func TestMergedHeap(t *testing.T) {
	SetSampleRate(1)
	defer SetSampleRate(512 << 10)
	blocks := make([]unsafe.Pointer, 100)
	for i := range blocks {
		blocks[i] = cAlloc(1000)
	}
	defer func() {
		for _, p := range blocks {
			cFree(p)
		}
	}()
	goLeakForTest()
	runtime.GC()
	var b bytes.Buffer
	if err := MergedHeap(&b); err != nil {
		t.Fatal(err)
	}
	p, err := parseProfile(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	goNames := names(p, func(s *sample) bool { return heapLabel(s) == "go" })
	if !goNames[goLeakName] {
		t.Fatal("the merged profile lacks the Go heap's profmalloc.goLeakForTest")
	}
	c, err := cHeap()
	if err != nil {
		t.Fatal(err)
	}
	var nc, cBytes int64
	for _, s := range p.Samples {
		if heapLabel(s) == "c" {
			nc++
			cBytes += s.Values[3]
		}
	}
	if nc < int64(len(c.Samples)) || cBytes < 100*1000 {
		t.Fatalf("the merged profile has %d C samples (%d bytes in use), the C heap had %d before",
			nc, cBytes, len(c.Samples))
	}
	if len(p.SampleTypes) != 4 || p.SampleTypes[3].Type != "inuse_space" {
		t.Fatalf("sample types %v", p.SampleTypes)
	}
}

func TestDelta(t *testing.T) {
	m := &mapping{ID: 1}
	f := &function{ID: 1, Name: "f"}
	l1 := &location{ID: 1, Mapping: m, Address: 0x1000, Lines: []line{{f, 0}}}
	l2 := &location{ID: 2, Mapping: m, Address: 0x2000, Lines: []line{{f, 0}}}
	mk := func(ts int64, a, b int64) *profile {
		return &profile{
			SampleTypes: []valueType{{"inuse_space", "bytes"}},
			TimeNanos:   ts,
			Samples: []*sample{
				{Locs: []*location{l1}, Values: []int64{a}},
				{Locs: []*location{l2}, Values: []int64{b}},
			},
		}
	}
	d := delta(mk(1e9, 100, 50), mk(3e9, 40, 50))
	if len(d.Samples) != 1 || d.Samples[0].Values[0] != -60 || d.DurationNanos != 2e9 {
		t.Fatalf("delta: %d samples, first %v, duration %d", len(d.Samples), d.Samples[0].Values, d.DurationNanos)
	}
}

func TestStats(t *testing.T) {
	SetSampleRate(4096)
	s := Stats()
	if s.SampleRate != 4096 || s.Mapped < s.InUse || s.Mapped == 0 {
		t.Fatalf("stats %+v", s)
	}
	SetSampleRate(512 << 10)
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	return r, b
}

func TestHandler(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r, b := get(t, srv.URL+"/debug/pprof/cheap")
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("cheap: %d %v", r.StatusCode, r.Header)
	}
	if _, err := parseProfile(b); err != nil {
		t.Fatal(err)
	}
	r, b = get(t, srv.URL+"/debug/pprof/callocs")
	p, err := parseProfile(b)
	if err != nil || p.DefaultSampleType != "alloc_space" {
		t.Fatalf("callocs: %v %q", err, p.DefaultSampleType)
	}
	r, b = get(t, srv.URL+"/debug/pprof/cheap?debug=1")
	if r.StatusCode != 200 || !strings.HasPrefix(string(b), "heap profile:") {
		t.Fatalf("debug=1: %d %q", r.StatusCode, b[:20])
	}
	t0 := time.Now()
	r, b = get(t, srv.URL+"/debug/pprof/cheap?seconds=1")
	if p, err = parseProfile(b); err != nil || p.DurationNanos < 9e8 || time.Since(t0) < 900*time.Millisecond {
		t.Fatalf("seconds=1: %v, duration %d", err, p.DurationNanos)
	}
	if r, _ = get(t, srv.URL+"/debug/pprof/cheap?seconds=0"); r.StatusCode != 400 {
		t.Fatalf("seconds=0: %d", r.StatusCode)
	}
	if r, b = get(t, srv.URL+"/debug/pprof/cstats"); r.StatusCode != 200 || !strings.Contains(string(b), "InUse:") {
		t.Fatalf("cstats: %d %q", r.StatusCode, b)
	}
	if r, _ = get(t, srv.URL+"/debug/pprof/merged-heap?gc=1"); r.StatusCode != 200 {
		t.Fatalf("merged-heap: %d", r.StatusCode)
	}
	h := httptest.NewServer(Handler())
	defer h.Close()
	if r, _ = get(t, h.URL+"/elsewhere"); r.StatusCode != 404 {
		t.Fatalf("unknown path: %d", r.StatusCode)
	}
}

func TestPeakHandler(t *testing.T) {
	cPeak() // 48 MiB in pm_go_test_peak_site, freed again
	mux := http.NewServeMux()
	Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r, b := get(t, srv.URL+"/debug/pprof/cpeak")
	if r.StatusCode != 200 || r.Header.Get("Content-Disposition") != `attachment; filename="cpeak"` {
		t.Fatalf("cpeak: %d %v %q", r.StatusCode, r.Header, b)
	}
	p, err := parseProfile(b)
	if err != nil {
		t.Fatal(err)
	}
	// the site function holding the most in-use bytes at the peak, each
	// sample counted once per function on its stack (cgo's _cgo_..._Cfunc_
	// wrapper, its caller, holds the same bytes and is left out)
	byFn := map[string]int64{}
	for _, s := range p.Samples {
		seen := map[string]bool{}
		for _, l := range s.Locs {
			for _, ln := range l.Lines {
				if !seen[ln.Fn.Name] && strings.Contains(ln.Fn.Name, "site") && !strings.HasPrefix(ln.Fn.Name, "_cgo_") {
					seen[ln.Fn.Name] = true
					byFn[ln.Fn.Name] += s.Values[3]
				}
			}
		}
	}
	top := ""
	for fn, v := range byFn {
		if top == "" || v > byFn[top] {
			top = fn
		}
	}
	// 768 blocks of 64 KiB at the 512 KiB mean rate are ~90 samples (a
	// standard error of ~11 %), and the copy is taken up to a tenth before
	// the top: 40 MiB of the 48 failed about one run in twelve
	if top != "pm_go_test_peak_site" || byFn[top] < 24<<20 {
		t.Fatalf("the peak's top site is %q (%v)", top, byFn)
	}
	live, err := cHeap()
	if err != nil {
		t.Fatal(err)
	}
	var still int64
	for _, s := range live.Samples {
		if names(&profile{Samples: []*sample{s}}, nil)["pm_go_test_peak_site"] {
			still += s.Values[3]
		}
	}
	if still > byFn[top]/10 {
		t.Fatalf("%d bytes of the freed peak blocks are still in the live C heap", still)
	}
	if r, b = get(t, srv.URL+"/debug/pprof/cpeak?debug=1"); r.StatusCode != 200 || !strings.HasPrefix(string(b), "heap profile:") {
		t.Fatalf("cpeak?debug=1: %d %q", r.StatusCode, b)
	}
	if r, _ = get(t, srv.URL+"/debug/pprof/cpeak?seconds=1"); r.StatusCode != 400 {
		t.Fatalf("cpeak?seconds=1: %d", r.StatusCode)
	}
}

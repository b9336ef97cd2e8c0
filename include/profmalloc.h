/* profmalloc.h — the public contract of profmalloc.
 *
 * profmalloc replaces the C library's malloc family (link with -lprofmalloc
 * or LD_PRELOAD=libprofmalloc.so); those functions keep their standard
 * declarations in <stdlib.h> and <malloc.h>.  This header adds what is
 * profmalloc's own: exact allocator statistics and the sampled heap
 * profiler.
 *
 * Environment (read once, at the first allocation; ignored in setuid and
 * setgid programs):
 * options: begin (make docs, from src/options.c)
 *   PROFMALLOC_SAMPLE_RATE   mean bytes between samples, with an optional k,
 *                            M or G suffix; 0 turns profiling off, 1 records
 *                            every allocation (default 512k)
 *   PROFMALLOC_DUMP          write a heap profile to this path at exit
 *                            (exit() or a return from main; a Go program
 *                            calls profmalloc_dump()); %p is the process id,
 *                            %e the program's name (the last part of the path
 *                            it was started by: a script's own name), %% a %,
 *                            any other % makes the value malformed (default
 *                            none)
 *   PROFMALLOC_DUMP_EMPTY    1: the exit dump is written even by a process
 *                            that sampled no allocation (by default such a
 *                            process, a shell in a wrapper script, writes
 *                            nothing) (default 0)
 *   PROFMALLOC_UNWIND        stack unwinder: dwarf (.eh_frame tables, works
 *                            without frame pointers) or fp (frame pointers:
 *                            faster, needs -fno-omit-frame-pointer
 *                            everywhere) (default dwarf)
 *   PROFMALLOC_TCACHE_BYTES  byte budget shared by all thread caches; unset,
 *                            the default or 2 MiB a live thread (up to 256
 *                            MiB), whichever is more (default 32M)
 *   PROFMALLOC_RELEASE_BYTES free resident memory kept before pages go back
 *                            to the OS (pages unused for a second go back
 *                            anyway); unset, the cap is the default or the
 *                            memory in use, whichever is more, and free
 *                            memory over it waits for the next tick (1/8 s)
 *                            below 1.5 times the cap, and stays while the
 *                            heap is within half the cap of its peak of the
 *                            last second (without RLIMIT_AS or strict
 *                            overcommit); set, it is the cap, held at every
 *                            free (default 64M)
 *   PROFMALLOC_VERBOSE       1 prints the options in force at start, and
 *                            where the exit dump was written (default 0)
 *   PROFMALLOC_KEEP_DEEPBIND 1: dlopen() keeps RTLD_DEEPBIND (dropped by
 *                            default, so that a library opened with it frees
 *                            through profmalloc; profmalloc(3), NOTES)
 *                            (default 0)
 *   PROFMALLOC_DUMP_PEAK     write the profile at the peak of live bytes to
 *                            this path at exit (doc/peak.md); %p is the
 *                            process id (default none)
 *   PROFMALLOC_LEAKS         1: at exit, the call stacks still holding
 *                            memory, on stderr; a path (%p allowed): their
 *                            profile instead (doc/leaks.md) (default none)
 *   PROFMALLOC_DUMP_PREFIX   the triggered dumps below go to
 *                            <prefix>.<pid>.<seq>.<kind>.pb.gz; %p is the
 *                            process id (default profmalloc)
 *   PROFMALLOC_DUMP_EVERY_BYTES
 *                            a dump each time this many more bytes were
 *                            allocated; 0 never (default 0)
 *   PROFMALLOC_DUMP_EVERY_INUSE
 *                            a dump each time the high-water mark of live
 *                            bytes passes a multiple of this; 0 never
 *                            (default 0)
 *   PROFMALLOC_DUMP_EVERY_SECONDS
 *                            a dump every this many seconds while the program
 *                            allocates; 0 never (default 0)
 *   PROFMALLOC_DUMP_SIGNAL   a dump when this signal arrives (SIGUSR2, USR2
 *                            or a number) (default none)
 *   PROFMALLOC_TIMELINE      append a record of live bytes about every
 *                            interval, and the top sites at each local peak,
 *                            to this path (doc/timeline.md); %p is the
 *                            process id (default none)
 *   PROFMALLOC_TIMELINE_INTERVAL
 *                            milliseconds between timeline records, 1 to
 *                            60000 (default 100)
 *   PROFMALLOC_TIMELINE_MAX  size at which the timeline rotates to path.1,
 *                            ..., at least 4k (default 64M)
 *   PROFMALLOC_TIMELINE_KEEP rotated timeline parts kept, 0 to 99 (default 3)
 *   PROFMALLOC_TIMELINE_SITES
 *                            sites listed at each timeline peak, 1 to 64
 *                            (default 16)
 *   PROFMALLOC_TIMELINE_PEAK_SECONDS
 *                            while live bytes only rise, a timeline peak
 *                            block at least this often; 0 never (default 10)
 *   HEAPPROFILE              gperftools: write <prefix>.0001.heap, ... on
 *                            gperftools' triggers and at exit; sets the
 *                            sample rate to 1 unless PROFMALLOC_SAMPLE_RATE
 *                            is given (doc/gperftools.md) (default none)
 *   HEAP_PROFILE_ALLOCATION_INTERVAL
 *                            gperftools: a dump each time this many more
 *                            bytes were allocated (default 1073741824)
 *   HEAP_PROFILE_INUSE_INTERVAL
 *                            gperftools: a dump each time the high-water mark
 *                            of live bytes rises by this much (default
 *                            104857600)
 *   HEAP_PROFILE_TIME_INTERVAL
 *                            gperftools: a dump every this many seconds; 0
 *                            never (default 0)
 *   HEAPPROFILESIGNAL        gperftools: a dump when this signal arrives
 *                            (default none)
 *   PROFMALLOC_HTTP          serve the heap profile at Go's /debug/pprof/
 *                            paths (heap, allocs, peak, symbol) and the
 *                            statistics and timeline at /debug/profmalloc/ on
 *                            host:port; :port means 127.0.0.1, port 0 picks
 *                            one (as profmalloc_http_start() does;
 *                            doc/http.md) (default none)
 *   PROFMALLOC_HTTP_PORT_FILE
 *                            a file the port PROFMALLOC_HTTP serves on is
 *                            written to (default none)
 * options: end
 * A malformed value is reported once on stderr and the default is used.
 */
#ifndef PROFMALLOC_H
#define PROFMALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PROFMALLOC_VERSION "0.1.0"

/* Exact allocator totals at one moment.  Every byte the allocator has
 * mapped is in exactly one of: in_use, thread_cache, central_cache,
 * pageheap_free, released, metadata, or (for the rest of a size-class
 * span that was never handed out) fragmentation:
 *   mapped == in_use + fragmentation + thread_cache + central_cache
 *             + pageheap_free + released + metadata                       */
typedef struct profmalloc_stats {
    uint64_t in_use;           /* bytes in blocks the application holds
                                  (usable size: rounded up to the class) */
    uint64_t requested;        /* bytes the application asked for, of in_use
                                  (exact only for blocks > 256 KiB and
                                  sampled ones; else equals in_use) */
    uint64_t mapped;           /* bytes of address space taken from the OS */
    uint64_t resident_estimate;/* mapped - released */
    uint64_t thread_cache;     /* free blocks held in per-thread caches */
    uint64_t central_cache;    /* free blocks held in central lists */
    uint64_t fragmentation;    /* unused tails of small-object spans */
    uint64_t pageheap_free;    /* free pages still resident */
    uint64_t released;         /* free pages returned to the OS */
    uint64_t metadata;         /* spans, page map, sample records */
    uint64_t threads;          /* live thread caches */
    uint64_t lock_contention;  /* lock acquisitions that had to wait */
    uint64_t sample_rate;      /* current PROFMALLOC_SAMPLE_RATE */
    uint64_t samples_live;     /* sampled blocks not yet freed */
} profmalloc_stats_t;

/* Fills *out; returns 0.  While no other thread allocates, mapped =
 * in_use + thread_cache + central_cache + fragmentation + pageheap_free +
 * released + metadata; otherwise (and in a child forked while other threads
 * allocated) mapped also holds the blocks they were moving. */
int profmalloc_get_stats(profmalloc_stats_t *out);

/* Extended statistics, ABI-stable by size: set struct_size to
 * sizeof(profmalloc_stats_ex_t) as your header has it; the library fills
 * that many bytes at most (fields it does not know stay 0) and sets
 * struct_size to what it filled.  Fields are only ever added at the end.
 * Returns 0, or -1 with errno EINVAL (out NULL or struct_size too small
 * for `base`). */
#define PROFMALLOC_STATS_CLASSES 128
typedef struct profmalloc_class_stats {
    uint64_t size;           /* object size of the class */
    uint64_t spans;          /* spans the class owns */
    uint64_t span_bytes;     /* their bytes */
    uint64_t in_use;         /* objects the application holds */
    uint64_t thread_cache;   /* free objects in thread caches */
    uint64_t central;        /* free objects in the central list and spans */
    uint64_t fragmentation;  /* bytes of its spans never cut into objects */
    uint64_t lock_waits;     /* acquisitions of its lock that had to wait */
} profmalloc_class_stats_t;

typedef struct profmalloc_stats_ex {
    uint64_t struct_size;
    profmalloc_stats_t base;
    uint64_t peak_mapped;         /* most address space mapped at once (all of
                                     profmalloc's mappings, scratch included) */
    uint64_t peak_live;           /* highest live bytes the profiler saw (exact
                                     at sample rate 1, else an estimate) */
    uint64_t pageheap_lock_waits; /* page heap lock acquisitions that waited */
    uint64_t central_lock_waits;  /* the same, summed over the classes */
    uint64_t mmap_calls, mmap_bytes;      /* system calls and their bytes */
    uint64_t munmap_calls, munmap_bytes;
    uint64_t madvise_calls, madvise_bytes; /* pages released (MADV_DONTNEED) */
    uint64_t mremap_calls, mremap_bytes;
    uint64_t nclasses;            /* entries used in classes[] */
    profmalloc_class_stats_t classes[PROFMALLOC_STATS_CLASSES];
    uint64_t faultin_calls, faultin_bytes; /* runs handed out whose pages were not
                                          resident (fresh mappings, or pages
                                          returned to the OS): they fault in */
} profmalloc_stats_ex_t;
int profmalloc_get_stats_ex(profmalloc_stats_ex_t *out);

/* Writes the statistics to fd: PROFMALLOC_STATS_TEXT (malloc_stats' text)
 * or PROFMALLOC_STATS_JSON (one JSON object).  0, or -1 with errno. */
#define PROFMALLOC_STATS_TEXT 0
#define PROFMALLOC_STATS_JSON 1
int profmalloc_stats_print(int fd, int format);

/* Heap profiles.  A dump is a snapshot of the sampled allocation sites and
 * the allocator's exact totals.  The default format is pprof profile.proto
 * (gzip container) in Go's heap layout; PROFMALLOC_FORMAT_LEGACY is the
 * gperftools "heap profile: ... @ heap_v2/<rate>" text.  profmalloc_dump
 * picks the legacy format for a path ending in ".heap", writes to a
 * temporary file beside `path` and renames it, so `path` is never left
 * half-written (through a symbolic link, the file it leads to);
 * /dev/stdout and /dev/fd/N are written through the descriptor, and another
 * `path` that exists and is not a regular file (a FIFO, a device) in place.
 * Both return 0, or -1 with errno set. */
#define PROFMALLOC_FORMAT_PPROF 0
#define PROFMALLOC_FORMAT_LEGACY 1
int profmalloc_dump(const char *path);
int profmalloc_dump_fd(int fd, int format);

/* Mean bytes between samples; 0 turns sampling off, 1 records every
 * allocation exactly; above INT64_MAX counts as INT64_MAX.  The calling
 * thread switches at once, other threads at their next trip to the
 * allocator's slow path. */
void profmalloc_set_sample_rate(size_t bytes);
size_t profmalloc_get_sample_rate(void);

/* Returns all free memory to the OS, like malloc_trim(0). */
void profmalloc_release_free_memory(void);

/* The profile at the peak: the sites' live counts copied when the live
 * bytes (the profiler's estimate; exact at rate 1) first passed 1.1 times
 * those of the previous copy, so within 10 % of the high-water mark.  Its
 * comments give the peak's exact in-use bytes and time.  Written as
 * profmalloc_dump writes (same formats, atomically); 0 or -1 with errno. */
int profmalloc_dump_peak(const char *path);

/* Before/after: profmalloc_mark remembers the sites' live counts;
 * profmalloc_dump_since_mark writes what changed since then as a pprof
 * profile whose in-use values are negative for sites that shrank (as
 * `go tool pprof -base` shows a difference).  Always profile.proto; without
 * a mark, the change since the start.  0 or -1 with errno. */
int profmalloc_mark(void);
int profmalloc_dump_since_mark(const char *path);

/* The timeline (PROFMALLOC_TIMELINE, doc/timeline.md) read back: every
 * complete interval record ('R'), peak block ('P') and end mark ('Z') in
 * file order; a record cut short by a crash is left out.  Fills
 * out[0..cap) and returns how many the file holds (more than cap when out
 * was too small), or -1 with errno set (EPROTO: not a version 1
 * timeline).  Allocates with malloc; no stdio. */
typedef struct profmalloc_timeline_point {
    int kind;            /* 'R' an interval record, 'P' a peak, 'Z' the end at exit */
    uint64_t t_ms;       /* milliseconds since the profiler started */
    uint64_t live;       /* live bytes the profiler sees (exact at rate 1) */
    uint64_t max, min;   /* 'R': highest and lowest live bytes in the interval */
    uint64_t allocs, frees, alloc_bytes, free_bytes; /* 'R': since the record before */
    uint64_t in_use;     /* 'R': the allocator's exact bytes in use */
    uint32_t nsites;     /* 'P': sites in the block */
    uintptr_t top_pc;    /* 'P': innermost return address of the largest site */
    uint64_t top_bytes;  /* 'P': that site's live bytes */
} profmalloc_timeline_point_t;
long profmalloc_timeline_read(const char *path, profmalloc_timeline_point_t *out, size_t cap);
/* The /debug/pprof endpoint (doc/http.md): a thread of the library's that
 * serves /debug/pprof/heap, /allocs, /symbol and /debug/profmalloc/stats
 * over HTTP/1.1.  addr is "host:port", "[v6addr]:port" or ":port" (which
 * means 127.0.0.1, not every interface); port 0 picks one.  NULL means
 * "127.0.0.1:0".  Returns the port served, or -1 with errno set (EINVAL
 * for a malformed address, EBUSY when already serving, or the socket's
 * error).  A forked child does not serve until it calls this itself.
 * profmalloc_http_stop waits for a request in flight to end (it is cut
 * short) and closes the socket; it runs at exit too. */
int profmalloc_http_start(const char *addr);
void profmalloc_http_stop(void);

#ifdef __cplusplus
}
#endif
#endif

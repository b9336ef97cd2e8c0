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
 *   PROFMALLOC_TCACHE_BYTES  byte budget shared by all thread caches (default
 *                            32M)
 *   PROFMALLOC_RELEASE_BYTES free resident memory kept before pages go back
 *                            to the OS (pages unused for a second go back
 *                            anyway); unset, the cap is the default or the
 *                            memory in use, whichever is more, and free
 *                            memory over it waits for the next tick (1/8 s)
 *                            below 1.5 times the cap; set, it is the cap,
 *                            held at every free (default 64M)
 *   PROFMALLOC_VERBOSE       1 prints the options in force at start, and
 *                            where the exit dump was written (default 0)
 *   PROFMALLOC_KEEP_DEEPBIND 1: dlopen() keeps RTLD_DEEPBIND (dropped by
 *                            default, so that a library opened with it frees
 *                            through profmalloc; profmalloc(3), NOTES)
 *                            (default 0)
 *   PROFMALLOC_HTTP          serve the heap profile at Go's /debug/pprof/
 *                            paths (heap, allocs, symbol) and the statistics
 *                            at /debug/profmalloc/stats on host:port; :port
 *                            means 127.0.0.1, port 0 picks one (as
 *                            profmalloc_http_start() does; doc/http.md)
 *                            (default none)
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

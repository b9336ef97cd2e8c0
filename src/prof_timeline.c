/* prof_timeline.c — PROFMALLOC_TIMELINE: a record of live bytes about
 * every 100 ms, the top sites at each local peak, in the line format of
 * doc/timeline.md (version 1), and profmalloc_timeline_read, its reader.
 * Records are written by the thread whose sampled allocation or slow path
 * (prof_peak.c) finds the interval over (no thread of its own), one
 * write(2) per record to an O_APPEND file, so a killed process leaves
 * every complete record.
 * Must never: write under a lock.  One writer at a time (the `busy` flag,
 * not a lock: a thread that finds it taken goes on); the interval's
 * highest and lowest live bytes are atomics any thread updates. */
#include "pm_hunt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

enum { PATH_CAP = 4096, BLOCK_CAP = 128 * 1024, SITES_MAX = 64 };
/* captures on the way up: at each 5 % rise plus this, so O(log) of them */
#define CAPTURE_STEP ((uint64_t)64 << 10)

typedef struct top_site {
    uint64_t bytes, objects, size;
    const void *site;
} top_site_t;

/* Zero and untouched while the timeline is off (every entry point returns
 * first thing when `on` is 0): with the big arrays, off the pages of the
 * small variables every process touches (its 2 KiB made .data 2 pages). */
PM_SPARSE_BSS static struct {
    _Atomic int on;                /* cleared at exit, and after a failed write */
    _Atomic int busy;
    _Atomic uint64_t next_ns;      /* monotonic time of the next record */
    _Atomic uint64_t iv_max;       /* the minimum: pm_sites_live_low */
    /* the writer's (under busy) */
    int fd;
    int pid;
    uint64_t size, part, start_mono, start_real;
    pm_hunt_totals_t last;
    char *path;                    /* expanded, PATH_CAP; then scratch */
    char *block;                   /* BLOCK_CAP of formatting room */
    /* local peak: the highest live bytes since the last peak written, and
     * the top sites at the record that saw it; while pk_falling (after a
     * peak's fall, before the next rise), pk_max is the lowest instead */
    uint64_t pk_max, pk_t, pk_rec; /* pk_rec: pk_max as of the last record */
    uint64_t pk_written;           /* t_ms of the last peak block */
    _Atomic uint64_t capture_at;   /* live bytes at which the sites are captured next */
    int pk_have, pk_falling;
    top_site_t pk_sites[SITES_MAX];
    size_t pk_n;
    int failed;
} tl;

void pm_timeline_init(void)
{
    if (!pm_options.timeline) return;
    tl.fd = -1;
    tl.start_mono = pm_os_monotonic_ns();
    tl.start_real = pm_os_now_ns();
    atomic_store_explicit(&tl.on, 1, memory_order_relaxed);
}

static void on_max(uint64_t live)
{
    uint64_t m = pm_relaxed_load(&tl.iv_max);
    while (live > m && !atomic_compare_exchange_weak(&tl.iv_max, &m, live)) {}
}

/* ---- the file ---------------------------------------------------------- */

static void header(pm_buf_t *b)
{
    pm_buf_str(b, "profmalloc-timeline 1 pid=");
    pm_buf_u64(b, (uint64_t)tl.pid);
    pm_buf_str(b, " start_ns=");
    pm_buf_u64(b, tl.start_real);
    pm_buf_str(b, " rate=");
    pm_buf_u64(b, pm_sampler_rate());
    pm_buf_str(b, " interval_ms=");
    pm_buf_u64(b, pm_options.timeline_interval_ms);
    pm_buf_str(b, " part=");
    pm_buf_u64(b, tl.part);
    pm_buf_str(b, "\n");
}

static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

/* M lines: the executable mappings of /proc/self/maps, reformatted. */
static void mappings(pm_buf_t *b)
{
    int fd = pm_os_open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return;
    char chunk[4096], line[1024];
    size_t n = 0;
    ssize_t r;
    while ((r = pm_os_read(fd, chunk, sizeof chunk)) > 0) {
        for (ssize_t i = 0; i < r; i++) {
            if (chunk[i] != '\n') {
                if (n < sizeof line - 1) line[n++] = chunk[i];
                continue;
            }
            line[n] = 0;
            n = 0;
            /* start-end perms offset dev inode path */
            char *f[6] = {line};
            int k = 0;
            for (char *p = line; *p && k < 5; p++)
                if (*p == ' ') {
                    *p = 0;
                    while (p[1] == ' ') p++;
                    f[++k] = p + 1;
                }
            if (k < 5 || f[1][2] != 'x' || f[5][0] != '/') continue;
            pm_buf_str(b, "M ");
            pm_buf_str(b, f[0]);
            pm_buf_str(b, " ");
            pm_buf_str(b, f[2]);
            pm_buf_str(b, " ");
            pm_buf_str(b, f[5]);
            pm_buf_str(b, "\n");
        }
    }
    pm_os_close(fd);
}

/* Opens the file at tl.path and writes its header: emptied first, except
 * in a forked child, which appends to a path without %p (its records
 * follow its own header; test_timeline_in_forked_child). */
static int open_file(int truncate)
{
    tl.fd = pm_os_open(tl.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
    if (tl.fd < 0) return -1;
    pm_buf_t b;
    pm_buf_init(&b, tl.block, BLOCK_CAP, -1);
    header(&b);
    mappings(&b);
    tl.size = b.len;
    return pm_os_write_all(tl.fd, tl.block, b.len);
}

/* The rotated part i of the timeline's name into out. */
static void part_name(char *out, uint64_t i)
{
    pm_buf_t b;
    pm_buf_init(&b, out, PATH_CAP + 31, -1);
    pm_buf_str(&b, tl.path);
    if (i) {
        pm_buf_str(&b, ".");
        pm_buf_u64(&b, i);
    }
    out[b.len] = 0;
}

/* path.(K-1) -> path.K, ..., path -> path.1; the oldest goes. */
static int rotate(void)
{
    pm_os_close(tl.fd);
    tl.fd = -1;
    char *from = tl.block, *to = tl.block + PATH_CAP + 32;
    uint64_t keep = pm_options.timeline_keep;
    if (!keep) {
        pm_os_unlink(tl.path);
    } else {
        for (uint64_t i = keep; i-- > 0;) {
            part_name(from, i);
            part_name(to, i + 1);
            pm_os_rename(from, to); /* a missing part is fine */
        }
    }
    tl.part++;
    return open_file(1);
}

static int start_file(int truncate)
{
    if (!tl.path) {
        char *mem = pm_os_map(PATH_CAP + BLOCK_CAP, 0);
        if (!mem) return -1;
        tl.path = mem;
        tl.block = mem + PATH_CAP;
    }
    tl.pid = (int)pm_os_getpid();
    tl.part = 0;
    if (pm_dump_expand(pm_options.timeline, tl.path, PATH_CAP) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return open_file(truncate);
}

/* Appends text[0..len) as one write, rotating first when it would pass the
 * size limit. */
static void emit(const char *text, size_t len)
{
    if (tl.size + len > pm_options.timeline_max && tl.size > 0 && rotate() != 0) goto fail;
    if (pm_os_write_all(tl.fd, text, len) != 0) goto fail;
    tl.size += len;
    return;
fail:
    /* stopped: a record cut short by a full disk must stay the file's last,
     * as after a crash, or the next would run on from its middle */
    if (!tl.failed++) pm_os_message("PROFMALLOC_TIMELINE: could not write the timeline; stopped");
    atomic_store(&tl.on, 0);
}

/* ---- records ------------------------------------------------------------ */

/* The top sites by live bytes now, into pk_sites. */
static void capture(void)
{
    static pm_site_copy_t c; /* its memory reused from capture to capture */
    tl.pk_n = 0;
    if (pm_hunt_copy_take(&c) != 0) return;
    size_t k = pm_options.timeline_sites;
    for (size_t i = 0; i < c.n; i++) {
        const pm_site_count_t *s = &c.v[i];
        if (s->alloc_bytes <= s->free_bytes) continue;
        top_site_t t = {(s->alloc_bytes - s->free_bytes) >> PM_FX_SHIFT,
                        s->alloc_objects > s->free_objects ? (s->alloc_objects - s->free_objects) >> PM_FX_SHIFT : 0,
                        0, s->site};
        if (tl.pk_n == k && t.bytes <= tl.pk_sites[k - 1].bytes) continue;
        size_t j = tl.pk_n < k ? tl.pk_n++ : k - 1;
        while (j > 0 && tl.pk_sites[j - 1].bytes < t.bytes) {
            tl.pk_sites[j] = tl.pk_sites[j - 1];
            j--;
        }
        tl.pk_sites[j] = t;
    }
}

static void write_peak(void)
{
    pm_buf_t b;
    pm_buf_init(&b, tl.block, BLOCK_CAP, -1);
    pm_buf_str(&b, "P ");
    pm_buf_u64(&b, tl.pk_t);
    pm_buf_str(&b, " ");
    pm_buf_u64(&b, tl.pk_max);
    pm_buf_str(&b, " ");
    pm_buf_u64(&b, tl.pk_n);
    pm_buf_str(&b, "\n");
    for (size_t i = 0; i < tl.pk_n; i++) {
        const uintptr_t *pcs;
        uint32_t depth;
        uint64_t size;
        pm_sites_info(tl.pk_sites[i].site, &pcs, &depth, &size, NULL);
        pm_buf_str(&b, "S ");
        pm_buf_u64(&b, tl.pk_sites[i].bytes);
        pm_buf_str(&b, " ");
        pm_buf_u64(&b, tl.pk_sites[i].objects);
        pm_buf_str(&b, " ");
        pm_buf_u64(&b, size);
        for (uint32_t d = 0; d < depth; d++) {
            char hex[20];
            pm_buf_t h;
            pm_buf_init(&h, hex, sizeof hex - 1, -1);
            pm_buf_hex(&h, pcs[d]);
            hex[h.len] = 0;
            pm_buf_str(&b, d ? "," : " ");
            /* without pm_buf_hex's 0x */
            pm_buf_str(&b, hex[0] == '0' && hex[1] == 'x' ? hex + 2 : hex);
        }
        pm_buf_str(&b, "\n");
    }
    pm_buf_str(&b, "E ");
    pm_buf_u64(&b, tl.pk_n);
    pm_buf_str(&b, "\n");
    if (!b.truncated) emit(tl.block, b.len);
    tl.pk_have = 0;
}

/* After a peak's fall, down to `low` so far: the next peak needs a rise
 * from the lowest point as large as a capture's step, so a blip during the
 * fall is not a second peak, and a second rise lower than where the first
 * peak was written is one (test_timeline_one_peak_per_fall). */
static void falling(uint64_t low)
{
    tl.pk_falling = 1;
    tl.pk_max = low;
    atomic_store_explicit(&tl.capture_at, low + low / 20 + CAPTURE_STEP, memory_order_relaxed);
}

/* One interval record, and the peak bookkeeping; `busy` held. */
static void record(uint64_t now, int at_exit)
{
    if (tl.fd < 0 || tl.pid != (int)pm_os_getpid()) { /* first, or a forked child */
        int child = tl.fd >= 0;
        if (child) pm_os_close(tl.fd);
        tl.fd = -1;
        tl.pk_have = tl.pk_falling = 0;
        tl.pk_max = tl.pk_rec = tl.pk_written = 0;
        atomic_store(&tl.capture_at, 0);
        if (tl.failed || start_file(!child) != 0) {
            if (!tl.failed++) pm_os_message("PROFMALLOC_TIMELINE: could not write the timeline; stopped");
            if (tl.fd >= 0) pm_os_close(tl.fd);
            tl.fd = -1;
            atomic_store(&tl.on, 0);
            return;
        }
    }
    uint64_t live = pm_hunt_live_bytes();
    uint64_t hi = atomic_exchange(&tl.iv_max, live), lo = pm_sites_live_low(live);
    if (hi < live) hi = live;
    if (lo > live) lo = live;
    pm_hunt_totals_t tot;
    pm_sites_totals(&tot);
    profmalloc_stats_t st;
    pm_stats_collect(&st);
    /* at rate 0 there are no samples: live bytes are the allocator's
     * exact count, seen only at the record, and there are no sites
     * (test_timeline_slow_allocator) */
    int unsampled = pm_sampler_rate() == 0;
    if (unsampled) live = hi = lo = st.in_use;
    uint64_t t = (now - tl.start_mono) / 1000000;
    char line[256];
    pm_buf_t b;
    pm_buf_init(&b, line, sizeof line, -1);
    pm_buf_str(&b, "R ");
    pm_buf_u64(&b, t);
    pm_buf_str(&b, " ");
    pm_buf_u64(&b, live);
    pm_buf_str(&b, " ");
    pm_buf_u64(&b, hi);
    pm_buf_str(&b, " ");
    pm_buf_u64(&b, lo);
    uint64_t d[4] = {tot.alloc_objects - tl.last.alloc_objects, tot.free_objects - tl.last.free_objects,
                     tot.alloc_bytes - tl.last.alloc_bytes, tot.free_bytes - tl.last.free_bytes};
    for (int i = 0; i < 4; i++) {
        pm_buf_str(&b, " ");
        pm_buf_u64(&b, (d[i] + (1u << (PM_FX_SHIFT - 1))) >> PM_FX_SHIFT);
    }
    pm_buf_str(&b, " ");
    pm_buf_u64(&b, st.in_use);
    pm_buf_str(&b, "\n");
    tl.last = tot;
    if (unsampled) {
        emit(line, b.len);
        return;
    }
    /* a local peak: a maximum followed by a fall of 10 %; in an interval
     * that raised the maximum, only the fall to `live` is known to come
     * after it (test_timeline_shape_and_peaks).  Its sites were captured
     * on the way up (pm_timeline_tick), unless none were: then a rise as
     * far as the next capture starts a peak here */
    if (!tl.pk_have && hi >= pm_relaxed_load(&tl.capture_at) && hi > tl.pk_max) {
        tl.pk_t = t;
        capture();
        tl.pk_have = 1;
    }
    if (tl.pk_have && hi > tl.pk_max) tl.pk_max = hi;
    int raised = tl.pk_max > tl.pk_rec; /* the maximum rose in this interval */
    emit(line, b.len);
    uint64_t fall = raised || live < lo ? live : lo;
    if (tl.pk_have && (fall <= tl.pk_max - tl.pk_max / 10 || at_exit)) {
        write_peak();
        falling(fall);
        tl.pk_written = t;
    } else if (!tl.pk_have && tl.pk_falling) {
        if (lo < tl.pk_max) falling(lo);
    } else if (!tl.pk_have && tl.pk_max && fall <= tl.pk_max - tl.pk_max / 10) {
        falling(fall); /* the fall after a peak written while rising */
    } else if (tl.pk_have && pm_options.timeline_peak_seconds &&
               t >= tl.pk_written + pm_options.timeline_peak_seconds * 1000) {
        /* a rise without a fall (a leak) still shows its sites this often:
         * the highest so far, the next from the next 5 % up
         * (test_timeline_sites_while_rising) */
        write_peak();
        tl.pk_falling = 0;
        tl.pk_written = t;
    }
    tl.pk_rec = tl.pk_max;
}

void pm_timeline_tick(uint64_t live)
{
    if (!atomic_load_explicit(&tl.on, memory_order_relaxed)) return;
    on_max(live);
    uint64_t now = pm_os_monotonic_ns();
    /* on the way up to a peak, its sites as they are at the top (within
     * 5 %): a spike that falls within one interval is still caught */
    if (live && live >= pm_relaxed_load(&tl.capture_at) && tl.fd >= 0) {
        int idle = 0;
        if (atomic_compare_exchange_strong(&tl.busy, &idle, 1)) {
            if (live >= pm_relaxed_load(&tl.capture_at)) {
                capture();
                tl.pk_have = 1;
                tl.pk_t = (now - tl.start_mono) / 1000000;
                if (live > tl.pk_max) tl.pk_max = live;
                atomic_store_explicit(&tl.capture_at, live + live / 20 + CAPTURE_STEP, memory_order_relaxed);
            }
            atomic_store(&tl.busy, 0);
        }
    }
    if (now < pm_relaxed_load(&tl.next_ns)) return;
    int idle = 0;
    if (!atomic_compare_exchange_strong(&tl.busy, &idle, 1)) return;
    if (now >= pm_relaxed_load(&tl.next_ns)) {
        atomic_store_explicit(&tl.next_ns, now + pm_options.timeline_interval_ms * 1000000, memory_order_relaxed);
        record(now, 0);
    }
    atomic_store(&tl.busy, 0);
}

/* In a forked child: a record the parent's other thread was writing is
 * not the child's to finish. */
void pm_timeline_child(void)
{
    if (atomic_load_explicit(&tl.busy, memory_order_relaxed)) atomic_store(&tl.busy, 0);
}

void pm_timeline_at_exit(void)
{
    if (!atomic_load_explicit(&tl.on, memory_order_relaxed)) return;
    pm_hunt_busy_take(&tl.busy);
    uint64_t now = pm_os_monotonic_ns();
    record(now, 1);
    if (tl.fd >= 0) {
        char line[64];
        pm_buf_t b;
        pm_buf_init(&b, line, sizeof line, -1);
        pm_buf_str(&b, "Z ");
        pm_buf_u64(&b, (now - tl.start_mono) / 1000000);
        pm_buf_str(&b, "\n");
        emit(line, b.len);
        pm_os_close(tl.fd);
        tl.fd = -1;
    }
    atomic_store(&tl.on, 0);
    atomic_store(&tl.busy, 0);
}

/* For the HTTP endpoint: the current part is opened and measured while no
 * record is being written (busy taken), so a rotation cannot move it away
 * and the copy ends at a record's end; the copy itself runs after. */
int pm_timeline_copy_fd(int out)
{
    if (!atomic_load_explicit(&tl.on, memory_order_relaxed)) return 1;
    pm_hunt_busy_take(&tl.busy);
    int in = -2;
    int64_t size = 0;
    if (atomic_load_explicit(&tl.on, memory_order_relaxed) && tl.fd >= 0) {
        in = pm_os_open(tl.path, O_RDONLY | O_CLOEXEC, 0);
        if (in >= 0) size = pm_os_seek(in, 0, SEEK_END);
    }
    atomic_store(&tl.busy, 0);
    if (in == -2) return 1;
    if (in < 0) return -1;
    char buf[4096];
    int64_t at = 0;
    int rc = pm_os_seek(in, 0, SEEK_SET) == 0 && size >= 0 ? 0 : -1;
    while (rc == 0 && at < size) {
        size_t want = size - at < (int64_t)sizeof buf ? (size_t)(size - at) : sizeof buf;
        ssize_t got = pm_os_read(in, buf, want);
        if (got <= 0 || pm_os_write_all(out, buf, (size_t)got) != 0) rc = -1;
        else at += got;
    }
    pm_os_close(in);
    return rc;
}

/* ---- the reader --------------------------------------------------------- */

/* The next space-separated decimal (or, hex != 0, hexadecimal) number of
 * *p, advancing it; -1 when there is none. */
static int field(const char **p, const char *end, uint64_t *v, int hex)
{
    const char *s = *p;
    while (s < end && *s == ' ') s++;
    const char *d = s;
    uint64_t n = 0;
    for (; s < end; s++) {
        int c = hex ? hexval(*s) : (*s >= '0' && *s <= '9' ? *s - '0' : -1);
        if (c < 0) break;
        n = n * (hex ? 16 : 10) + (uint64_t)c;
    }
    if (s == d) return -1;
    *p = s;
    *v = n;
    return 0;
}

PM_EXPORT long profmalloc_timeline_read(const char *path, profmalloc_timeline_point_t *out, size_t cap)
{
    int fd = pm_os_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    size_t len = 0, room = 1 << 16;
    char *text = malloc(room);
    for (ssize_t r; text; len += (size_t)r) {
        if (len == room) {
            char *bigger = realloc(text, room *= 2);
            if (!bigger) {
                free(text);
                text = NULL;
                break;
            }
            text = bigger;
        }
        r = pm_os_read(fd, text + len, room - len);
        if (r < 0) {
            free(text);
            text = NULL;
        }
        if (r <= 0) break;
    }
    int saved = errno;
    pm_os_close(fd);
    if (!text) {
        errno = saved ? saved : ENOMEM;
        return -1;
    }
    static const char magic[] = "profmalloc-timeline 1 ";
    size_t same = 0;
    while (same < sizeof magic - 1 && same < len && text[same] == magic[same]) same++;
    if (same < sizeof magic - 1) {
        free(text);
        errno = EPROTO;
        return -1;
    }
    long n = 0;
    profmalloc_timeline_point_t peak = {0};
    uint64_t in_peak = 0, seen = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = p;
        while (nl < end && *nl != '\n') nl++;
        if (nl == end) break; /* a last line without its newline: cut short */
        const char *q = p + 1;
        profmalloc_timeline_point_t x = {0};
        uint64_t v[10];
        int k = 0;
        switch (*p) {
        case 'R':
            while (k < 10 && field(&q, nl, &v[k], 0) == 0) k++;
            if (k >= 8) {
                x = (profmalloc_timeline_point_t){.kind = 'R', .t_ms = v[0], .live = v[1], .max = v[2],
                                                  .min = v[3], .allocs = v[4], .frees = v[5],
                                                  .alloc_bytes = v[6], .free_bytes = v[7],
                                                  .in_use = k >= 9 ? v[8] : 0};
                if ((size_t)n < cap) out[n] = x;
                n++;
            }
            in_peak = 0;
            break;
        case 'P':
            while (k < 3 && field(&q, nl, &v[k], 0) == 0) k++;
            if (k == 3) {
                peak = (profmalloc_timeline_point_t){.kind = 'P', .t_ms = v[0], .live = v[1], .max = v[1],
                                                     .min = v[1], .nsites = (uint32_t)v[2]};
                in_peak = 1;
                seen = 0;
            }
            break;
        case 'S':
            if (in_peak) {
                uint64_t bytes, pc;
                if (field(&q, nl, &bytes, 0) == 0 && seen == 0) {
                    uint64_t skip;
                    field(&q, nl, &skip, 0);
                    field(&q, nl, &skip, 0);
                    if (field(&q, nl, &pc, 1) == 0) peak.top_pc = (uintptr_t)pc;
                    peak.top_bytes = bytes;
                }
                seen++;
            }
            break;
        case 'E':
            if (in_peak && field(&q, nl, &v[0], 0) == 0 && v[0] == peak.nsites && seen == peak.nsites) {
                if ((size_t)n < cap) out[n] = peak;
                n++;
            }
            in_peak = 0;
            break;
        case 'Z':
            if (field(&q, nl, &v[0], 0) == 0) {
                x = (profmalloc_timeline_point_t){.kind = 'Z', .t_ms = v[0]};
                if ((size_t)n < cap) out[n] = x;
                n++;
            }
            in_peak = 0;
            break;
        default: /* the header, M lines, lines of later versions */
            break;
        }
        p = nl + 1;
    }
    free(text);
    return n;
}

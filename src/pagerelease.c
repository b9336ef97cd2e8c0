/* pagerelease.c — the release policy: which free pages of the page heap go
 * back to the OS, and when.  It only decides: pageheap.c describes its
 * state (pm_heap_view_t) under its lock, asks pm_release_choose_locked
 * for a plan, picks the spans the plan names, and releases them after
 * dropping the lock.  Never touches a span, a list or the OS.
 * Lock: the page heap's; the few times kept here (rel) are read and
 * written only under it, except the tick's gate, an atomic.
 * Each rule below is a function with the reason it exists; the rules'
 * history and measurements are in doc/design.md (memory release policy). */
#include "pm_internal.h"

#define PM_DECAY_NS 1000000000ull
#define TICK_RELEASE_PAGES 4096 /* 32 MiB: what one tick returns at most */
#define GROWTH_AGE_NS (PM_DECAY_NS / 8)
#define PEAK_WINDOW_NS (PM_DECAY_NS / 2)

static struct {
    uint64_t retry_ns;       /* no release tried before this, but of runs to unmap */
    uint64_t unmap_scan_ns;  /* next look for released runs to unmap */
    uint64_t excess_scan_ns; /* next look when released pages outnumber those in use */
    _Atomic uint64_t tick_ns; /* pm_release_tick_due says yes again after this */
    uint64_t peak[2];        /* most pages in use seen in this window of PEAK_WINDOW_NS, and the last */
    uint64_t peak_window;    /* now / PEAK_WINDOW_NS of peak[0] */
    uint64_t huge_gone_ns;   /* when a huge block last went back at its free (0: never) */
    uint64_t huge_rounds_ns; /* huge blocks freed before this stay: rounds of them */
} rel;

/* The most pages in use seen by the rules in the last half second to a
 * second (two windows).  Windows of a second kept bench/tide's pages for
 * up to two seconds after its live set fell to an eighth (238 MB against
 * 100 MB 1.5 s later); a round of bench/pyrounds is a fifth of a second. */
PM_INLINE uint64_t recent_peak(const pm_heap_view_t *v)
{
    uint64_t w = v->now / PEAK_WINDOW_NS;
    if (w != rel.peak_window) {
        rel.peak[1] = w == rel.peak_window + 1 ? rel.peak[0] : 0;
        rel.peak[0] = 0;
        rel.peak_window = w;
    }
    uint64_t seen = v->in_use + v->grow_pages;
    if (seen > rel.peak[0]) rel.peak[0] = seen;
    return rel.peak[0] > rel.peak[1] ? rel.peak[0] : rel.peak[1];
}

/* Whether the heap, `more` pages larger, stays within `slack` pages over
 * the most pages used lately (recent_peak), where address space is
 * not scarce and the user set no cap (see rule_cap). */
static int within_peak(const pm_heap_view_t *v, uint64_t peak, uint64_t more, uint64_t slack)
{
    return !pm_options.release_bytes_set && !v->space_limited && v->in_use + v->free + more <= peak + slack;
}

/* ---- the rules ----------------------------------------------------------- */

/* Decay: a free span nobody reused for a second goes back, so an idle or
 * shrinking heap gives memory back while reuse within the second costs no
 * page fault (test_pageheap_tick_releases). */
static void rule_decay(const pm_heap_view_t *v, pm_release_plan_t *p)
{
    /* (after the cap's aged pick, which takes the oldest spans first) */
    if (p->aged_before) return;
    if (v->now >= PM_DECAY_NS && v->oldest_free_ns <= v->now - PM_DECAY_NS) p->aged_before = v->now - PM_DECAY_NS;
}

/* The cap: more resident free pages than the pages in use (or 64 MiB,
 * PROFMALLOC_RELEASE_BYTES, if more) and the longest free spans go back
 * down to 7/8 of it, so fragmentation cannot hold more than the program
 * uses; a cap the user gave holds alone, as a program under a cgroup limit
 * asked for that bound (test_pageheap_release_cap_grows_with_heap). */
static void rule_cap(const pm_heap_view_t *v, int event, pm_release_plan_t *p, uint64_t peak)
{
    uint64_t limit = pm_options.release_bytes >> PM_PAGE_SHIFT;
    if (!pm_options.release_bytes_set && limit < v->in_use) limit = v->in_use;
    if (v->free <= limit) return;
    /* Rounds: free pages that keep the heap within half the cap over the
     * most pages in use lately (recent_peak) stay, for the decay rule to
     * return a second later.  A program that drops its big blocks at the
     * end of a round makes them again in the next, and faulted every page
     * in again (bench/pyrounds: 680 k page faults; 168 k with a quarter of
     * the cap, whose first round's free runs that no block reused took the
     * heap past it; 144 k with half, tcmalloc 147 k).  Half once raised
     * bench/grow's peak RSS by a sixth; since its old copies stay within
     * the peak (pm_release_keep_moved_locked) it moves nothing there.  Not
     * where address space is scarce: a program's own mmap after a big free
     * needs the room glibc's munmapped chunks leave
     * (test_pageheap_cap_holds_rounds, test_release_rounds_slack, test_api:
     * test_freed_address_space_returns). */
    if (within_peak(v, peak, 0, limit / 2)) return;
    /* Paced: the default cap is enforced a tick at a time; a free
     * enforces it past 1.5 times the cap only on spans unused for an
     * eighth of a second, oldest first, and on any span only past twice
     * the cap.  Fragmentation's free runs come and go as blocks of random
     * size are replaced, and releasing the ones just freed made the next
     * blocks fault in fresh pages (bench/bigrepeat); a program that frees
     * much at once and then sleeps still keeps no more than twice the cap.
     * A cap the user gave holds at every free (test_pageheap_cap_paced). */
    if (event == PM_RELEASE_FREE && !pm_options.release_bytes_set) {
        if (v->free <= limit + limit / 2) return;
        if (v->free <= 2 * limit) {
            if (v->now < GROWTH_AGE_NS) return;
            p->aged_before = v->now - GROWTH_AGE_NS;
            p->aged_floor = limit - limit / 8;
            return;
        }
    }
    p->keep_pages = limit - limit / 8;
}

/* Growth: when fresh pages are about to be faulted in because no resident
 * free span fits, as many resident free pages go back, oldest first, so
 * fragmentation does not grow the resident set; only spans unused for an
 * eighth of a second (the one freed a moment ago is what the next block is
 * cut from), and never below a quarter of the pages in use
 * (test_pageheap_growth_floor, test_pageheap_growth_keeps_young). */
static void rule_growth(const pm_heap_view_t *v, pm_release_plan_t *p, uint64_t peak)
{
    /* (nor while the heap stays within its recent peak: rounds, see
     * rule_cap) */
    if (within_peak(v, peak, v->grow_pages, 0)) return;
    uint64_t floor = (pm_options.release_bytes >> PM_PAGE_SHIFT) / 32;
    if (floor < v->in_use / 4) floor = v->in_use / 4;
    if (v->now < GROWTH_AGE_NS || v->free <= floor) return;
    p->aged_before = v->now - GROWTH_AGE_NS;
    p->aged_pages = v->grow_pages;
    p->aged_floor = floor;
}

/* Move: a block that realloc moved with its pages (mremap) faults in its
 * growth as fresh pages, and is never cut from the free runs the growth
 * rule keeps for being young: they go too, oldest first, down to the same
 * floor.  A buffer doubled to 2 GiB in each of two rounds moved past the
 * 1 GiB the last round left free a moment before and kept it: 3.0 GB peak
 * RSS against glibc's 2.0 (test_pageheap_move_releases_young). */
static void rule_move(const pm_heap_view_t *v, pm_release_plan_t *p, uint64_t peak)
{
    rule_growth(v, p, peak);
    if (p->aged_before) p->aged_before = v->now;
}

/* Refusals: after the kernel refused a release (mlock, huge kernel pages)
 * nothing is madvised for a second, only runs long enough to be unmapped
 * (munmap works where madvise is refused), so a locked heap costs one
 * failed call a second, not one per free (test_api:
 * test_calloc_zeroed_locked). */
static int rule_refused(const pm_heap_view_t *v) { return v->now < rel.retry_ns; }

/* Stale released runs: released runs unused for a second are unmapped, so
 * their address space and commit charge go too; looked for once a second,
 * so the walk stays cheap (test_pageheap_decay_unmaps). */
static void rule_stale(const pm_heap_view_t *v, pm_release_plan_t *p)
{
    if (v->now < rel.unmap_scan_ns) return;
    p->stale = 1;
    p->stale_before = v->now >= PM_DECAY_NS ? v->now - PM_DECAY_NS : 0;
    rel.unmap_scan_ns = v->now + PM_DECAY_NS;
}

/* Excess: while released pages outnumber those in use, released runs of
 * any age are unmapped every sixteenth of a second (a program replacing
 * blocks of random size and alignment kept many times its live bytes in
 * address space), but only where that splits no mapping, at an edge of
 * the heap's address space: a hole between two live blocks costs a
 * mapping for as long as they live, and 4 MiB-aligned blocks of 16 KiB
 * each became a mapping as their unused rests were unmapped while they
 * were made (test_pageheap_excess_keeps_holes_out).  Its walk looks for
 * the stale runs too. */
static void rule_excess(const pm_heap_view_t *v, pm_release_plan_t *p)
{
    uint64_t limit = pm_options.release_bytes >> PM_PAGE_SHIFT;
    if (v->released <= (v->in_use > limit ? v->in_use : limit) || v->now < rel.excess_scan_ns) return;
    p->stale = 1;
    p->stale_before = v->now >= PM_DECAY_NS ? v->now - PM_DECAY_NS : 0;
    p->stale_edges = 1;
    rel.unmap_scan_ns = v->now + PM_DECAY_NS;
    rel.excess_scan_ns = v->now + PM_DECAY_NS / 16;
}

/* Moved: the old copy of a block realloc moved stays resident when the new
 * block was cut from resident pages and the resident free pages, with it,
 * stay within the pages in use (or the user's cap), or when the heap with
 * it stays within its recent peak (rounds, see rule_cap); else it goes
 * back at once, as mremap leaves nothing behind.  Vectors doubling in turn
 * cut each new block from the copies others left (grow -m double -t 4:
 * 260 k page faults when every copy went back, 91 k with the first test
 * alone, tcmalloc's 48 k); in a round that starts over, the pages the last
 * round freed outnumber those in use, and without the peak every copy
 * went back while the next block was cut from what was left (bench/run.sh's
 * vectors: 137 k faults, 66 k with it, tcmalloc 53 k;
 * test_pageheap_moved_copy_kept_within_use, _within_peak). */
int pm_release_keep_moved_locked(const pm_heap_view_t *v, uint64_t pages, int fresh)
{
    uint64_t limit = pm_options.release_bytes_set ? pm_options.release_bytes >> PM_PAGE_SHIFT : v->in_use;
    if (!fresh && v->free + pages <= limit) return 1;
    return within_peak(v, recent_peak(v), pages, 0);
}

/* Huge: a freed block of PM_HUGE_FREE or more goes back at once unless
 * the resident free pages with it stay within the cap (see rule_cap), as
 * glibc and mimalloc unmap a block that big at its free: a program that
 * freed a 1 GiB block and went on with a little allocation or none, which
 * ticks no rule, kept all of it resident for good.  But once a huge block
 * is made on fresh pages within a second of one going back (huge_round),
 * the program works in rounds of them, and huge blocks freed within a
 * second of the last stay as rule_cap's rounds do: 1 GiB made, written and
 * freed 10 times faults in two rounds, 1.5 s (tcmalloc 1.6-1.8 s, two
 * rounds' faults too; glibc 6.1 s, every round's;
 * test_pagerelease.c: test_pageheap_huge_free_released). */
int pm_release_keep_huge_locked(const pm_heap_view_t *v, uint64_t pages)
{
    /* (the block's pages still count as in use) */
    uint64_t limit = pm_options.release_bytes >> PM_PAGE_SHIFT, rest = v->in_use > pages ? v->in_use - pages : 0;
    if (!pm_options.release_bytes_set && limit < rest) limit = rest;
    if (v->free + pages <= limit) return 1;
    if (v->now < rel.huge_rounds_ns && within_peak(v, recent_peak(v), 0, limit / 2)) {
        rel.huge_rounds_ns = v->now + PM_DECAY_NS;
        return 1;
    }
    rel.huge_gone_ns = v->now;
    return 0;
}

/* Fresh pages for a huge block within a second of one going back at its
 * free: rounds (see pm_release_keep_huge_locked). */
static void huge_round(const pm_heap_view_t *v)
{
    if (v->grow_pages >= (PM_HUGE_FREE >> PM_PAGE_SHIFT) && rel.huge_gone_ns && v->now - rel.huge_gone_ns < PM_DECAY_NS)
        rel.huge_rounds_ns = v->now + PM_DECAY_NS;
}

/* ---- the chooser ----------------------------------------------------------- */

void pm_release_choose_locked(const pm_heap_view_t *v, int event, pm_release_plan_t *p)
{
    *p = (pm_release_plan_t){.keep_pages = UINT64_MAX};
    uint64_t peak = recent_peak(v);
    switch (event) {
    case PM_RELEASE_GROWTH:
        huge_round(v);
        if (!rule_refused(v)) rule_growth(v, p, peak);
        return;
    case PM_RELEASE_MOVE:
        huge_round(v);
        if (!rule_refused(v)) rule_move(v, p, peak);
        return;
    case PM_RELEASE_TICK:
        /* at most 32 MiB a tick: a tick that returned a run of GBs at once
         * held a small malloc in another thread for as long
         * (test_pageheap_tick_bounded) */
        p->budget = TICK_RELEASE_PAGES;
        /* fall through */
    case PM_RELEASE_FREE:
        rule_cap(v, event, p, peak);
        rule_decay(v, p);
        p->long_only = rule_refused(v);
        rule_excess(v, p);
        rule_stale(v, p);
        return;
    }
}

void pm_release_stale_full_locked(void)
{
    /* a full batch of stale runs: the next free looks again (one batch a
     * second fell behind: 400 long runs waited in a loop) */
    rel.unmap_scan_ns = 0;
    rel.excess_scan_ns = 0;
}

void pm_release_refused_locked(uint64_t now) { rel.retry_ns = now + PM_DECAY_NS; }

/* The tick runs the rules as the program allocates, at most eight times a
 * second: without it a program that freed its big blocks and went on with
 * small ones (served by the thread caches) kept the freed pages for good. */
int pm_release_tick_due(uint64_t now)
{
    /* one thread of those that find it due moves it on and ticks: each
     * counting the tick ran the rules twice and aged idle thread caches
     * faster (pm_tcache_tick) */
    uint64_t due = pm_relaxed_load(&rel.tick_ns);
    if (now < due) return 0;
    return atomic_compare_exchange_strong_explicit(&rel.tick_ns, &due, now + PM_DECAY_NS / 8, memory_order_relaxed,
                                                   memory_order_relaxed);
}

uint64_t pm_release_decay_ns(void) { return PM_DECAY_NS; }

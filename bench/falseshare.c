/* falseshare — threads that each reuse one small block and write it hard.
 *
 * What it stresses: T threads each run N rounds of malloc(Z bytes), W
 * passes that write each byte and read it back, free.  -m thrash: each thread allocates
 * its own blocks from the start.  -m scratch: the main thread first
 * allocates one block per thread (neighbours, as any allocator lays out
 * consecutive small blocks) and hands them over; each thread frees its
 * block before its rounds, so an allocator that gives a freed block back
 * to the thread that freed it keeps the threads on the neighbours' lines.
 * Why: a block under a cache line shares its line with other blocks; when
 * two threads' blocks share one, every write of one thread takes the line
 * away from the other core (false sharing), and the loop runs several
 * times slower although nothing is shared in the program.  A thread cache
 * fed one block at a time from a shared list, or keeping the block it just
 * freed, hands threads neighbouring blocks (Hoard's cache-thrash and
 * cache-scratch patterns).
 *
 * Options: -t threads (default 2), -n rounds per thread (default 20000),
 * -b writes of the block per round (default 1000), -z block size (default
 * 8), -m thrash|scratch (default thrash), -s seed (unused).
 * Result: ops= rounds of all threads, seconds= wall time from the threads'
 * start to the last one's end, mode=.
 */
#include "bench_common.h"

#include <pthread.h>

typedef struct {
    unsigned char *given; /* scratch: the main thread's block, freed first */
    long rounds, writes;
    size_t size;
} job_t;

static void *run(void *vp)
{
    job_t *j = vp;
    if (j->given) free(j->given);
    for (long r = 0; r < j->rounds; r++) {
        volatile unsigned char *p = xmalloc(j->size);
        for (long w = 0; w < j->writes; w++)
            for (size_t i = 0; i < j->size; i++) {
                p[i] = (unsigned char)(w + i);
                if (p[i] != (unsigned char)(w + i)) die("block %p lost its contents", (void *)p);
            }
        free((void *)p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 2, .iters = 20000, .seed = 1, .live = 1, .batch = 1000, .size = 8};
    parse_opts(argc, argv, &o, "[-t threads] [-n rounds] [-b writes] [-z size] [-m thrash|scratch]");
    int scratch = 0;
    if (o.mode && strcmp(o.mode, "scratch") == 0) scratch = 1;
    else if (o.mode && strcmp(o.mode, "thrash") != 0) die("unknown mode %s", o.mode);
    if (o.size < 1) die("size %ld", o.size);
    job_t *job = xmalloc(sizeof *job * (size_t)o.threads);
    pthread_t *th = xmalloc(sizeof *th * (size_t)o.threads);
    for (int i = 0; i < o.threads; i++)
        job[i] = (job_t){scratch ? xmalloc((size_t)o.size) : NULL, o.iters, o.batch, (size_t)o.size};
    double t0 = now_sec();
    for (int i = 0; i < o.threads; i++)
        if (pthread_create(&th[i], NULL, run, &job[i]) != 0) die("pthread_create failed");
    for (int i = 0; i < o.threads; i++) pthread_join(th[i], NULL);
    double t = now_sec() - t0;
    free(th);
    free(job);
    char extra[32];
    snprintf(extra, sizeof extra, "mode=%s", scratch ? "scratch" : "thrash");
    report(scratch ? "scratch" : "thrash", o.threads, (double)o.iters * o.threads, t, extra);
    return 0;
}

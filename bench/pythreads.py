#!/usr/bin/env python3
"""pythreads — a real program on the allocator: Python threads building dicts.

What it stresses: the CPython interpreter (PYTHONMALLOC=malloc, so every
object goes through malloc) runs T threads under the GIL; each keeps a dict
of 2000 keys whose values are lists of 1..7 strings of 18..360 bytes,
replaces a random key's value at every step, and every 500 steps serialises
the dict to JSON (one large string and many temporaries).  The threads take
turns holding the GIL, so each one's cache sits idle while the others run.
Why: this is what a leak hunter's Python service or build tool looks like
to malloc: many size classes, blocks freed by the thread that made them but
in phases, large strings now and then.  Thread caches that grow to
tcmalloc's 4 MiB per thread held 16 MB here; peak RSS is the number to
watch, next to glibc's.

Options: -t threads (default 4), -n steps per thread (default 6000), -s seed.
The script re-executes itself with PYTHONMALLOC=malloc when that is not
set (LD_PRELOAD stays in the environment).  At the end each thread checks
that its dict survives a JSON round trip unchanged.
Result line like the C workloads: ops= total steps, seconds= wall time of
the threads, peak_rss_kb= VmHWM.
"""
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pybench  # noqa: E402 (bench/pybench.py, installed beside the scripts)


def die(msg):
    pybench.die("pythreads", msg)


def parse(argv):
    opts = pybench.parse("pythreads", argv, {"-t": 4, "-n": 6000, "-s": 1}, "[-t threads] [-n steps_per_thread] [-s seed]")
    return opts["-t"], opts["-n"], opts["-s"]


def work(seed, steps, out, idx):
    r = random.Random(seed)
    d = {}
    for i in range(steps):
        k = r.randrange(2000)
        d[k] = [str(r.random()) * r.randrange(1, 20) for _ in range(r.randrange(1, 8))]
        if i % 500 == 0:
            json.dumps(d)
    back = json.loads(json.dumps(d))
    out[idx] = back == {str(k): v for k, v in d.items()}


def main():
    pybench.with_malloc(__file__)
    nthreads, steps, seed = parse(sys.argv[1:])
    ok = [False] * nthreads
    threads = [threading.Thread(target=work, args=(seed * 1000003 + i, steps, ok, i))
               for i in range(nthreads)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    if not all(ok):
        die("a dict did not survive its JSON round trip")
    ops = nthreads * steps
    print("workload=pythreads threads=%d ops=%d seconds=%.6f ns_per_op=%.2f mops=%.3f peak_rss_kb=%d"
          % (nthreads, ops, secs, secs * 1e9 / ops, ops / secs / 1e6, pybench.peak_rss_kb()))


main()

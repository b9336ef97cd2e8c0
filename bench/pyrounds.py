#!/usr/bin/env python3
"""pyrounds — a real program that frees its big blocks and makes them again.

What it stresses: the CPython interpreter (PYTHONMALLOC=malloc) runs R
rounds; each round makes 300 bytearrays of 64 KiB to 3 MiB (every seventh
written at both ends), replaces 100 of them by bytes objects of up to
2 MiB, builds a 200 000-entry dict and a 300 000-entry list, and then drops
everything.  About 450 MB is freed at the end of every round and asked for
again at the start of the next.
Why: batch jobs, request handlers and build tools work in rounds like this.
glibc keeps the freed blocks in its heap (its mmap threshold rises after
the first big free), so the next round reuses them without page faults.
An allocator that hands them back to the OS at once pays for every page
again in the next round; one that keeps everything forever holds the peak
after the program has shrunk.  Time and page faults are the numbers to
watch, with peak RSS next to glibc's.

Options: -r rounds (default 6), -s seed.  Re-executes itself with
PYTHONMALLOC=malloc when that is not set (LD_PRELOAD stays set).  Each
round checks a sample of the bytes it wrote.
Result line like the C workloads: ops= rounds, seconds= wall time,
peak_rss_kb= VmHWM, plus minflt= (minor page faults of the process).
"""
import os
import random
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pybench  # noqa: E402 (bench/pybench.py, installed beside the scripts)


def die(msg):
    pybench.die("pyrounds", msg)


def parse(argv):
    opts = pybench.parse("pyrounds", argv, {"-r": 6, "-s": 1}, "[-r rounds] [-s seed]")
    return opts["-r"], opts["-s"]


def one_round(r):
    blocks = []
    for i in range(300):
        b = bytearray(r.randrange(64 << 10, 3 << 20))
        if i % 7 == 0:
            b[0] = i & 0xFF
            b[-1] = (i * 3) & 0xFF
        blocks.append(b)
    for _ in range(100):
        j = r.randrange(300)
        blocks[j] = bytes(r.randrange(1, 2 << 20))
    d = {i: str(i) for i in range(200000)}
    lst = [i * 2 for i in range(300000)]
    for i in range(0, 300, 7):
        b = blocks[i]
        if isinstance(b, bytearray) and (b[0] != i & 0xFF or b[-1] != (i * 3) & 0xFF):
            die("block %d lost its contents" % i)
    if d[199999] != "199999" or lst[-1] != 599998:
        die("dict or list lost its contents")


def main():
    pybench.with_malloc(__file__)
    rounds, seed = parse(sys.argv[1:])
    r = random.Random(seed)
    t0 = time.perf_counter()
    for _ in range(rounds):
        one_round(r)
    secs = time.perf_counter() - t0
    flt = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print("workload=pyrounds threads=1 ops=%d seconds=%.6f ns_per_op=%.2f mops=%.6f peak_rss_kb=%d minflt=%d"
          % (rounds, secs, secs * 1e9 / rounds, rounds / secs / 1e6, pybench.peak_rss_kb(), flt))


main()

"""pybench — what the Python workloads (bench/py*.py) share: the
re-execution under PYTHONMALLOC=malloc, option parsing, errors, VmHWM."""
import os
import sys


def die(name, msg):
    sys.stderr.write("%s: FAIL: %s\n" % (name, msg))
    sys.exit(1)


def with_malloc(script):
    """Re-executes `script` with PYTHONMALLOC=malloc, so that every object
    goes through malloc (LD_PRELOAD stays in the environment)."""
    if os.environ.get("PYTHONMALLOC") != "malloc":
        env = dict(os.environ, PYTHONMALLOC="malloc")
        os.execve(sys.executable, [sys.executable, os.path.abspath(script)] + sys.argv[1:], env)


def parse(name, argv, opts, usage):
    """Options -x N, each a positive integer, into a copy of opts."""
    opts = dict(opts)
    i = 0
    while i < len(argv):
        if argv[i] not in opts or i + 1 >= len(argv):
            die(name, "usage: %s %s" % (name, usage))
        try:
            opts[argv[i]] = int(argv[i + 1])
        except ValueError:
            die(name, "%s needs a number, not %r" % (argv[i], argv[i + 1]))
        if opts[argv[i]] < 1:
            die(name, "%s must be at least 1" % argv[i])
        i += 2
    return opts


def peak_rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1

#!/usr/bin/env python3
"""test_http.py — the /debug/pprof endpoint (src/prof_http.c) end to end,
against test/http/http_target.c over loopback, with http.client and raw
sockets.  Usage: test_http.py <http_target> [<name>...]"""
import gzip
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

TARGET = os.path.abspath(sys.argv[1])
HTTPConnection = http.client.HTTPConnection  # Target's parameter `http` hides the module
TMP = tempfile.mkdtemp(prefix="pm-http-")


# ---- a profile.proto reader: just what the assertions need --------------

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return v, i


def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 2:
            n, i = varint(b, i)
            v = b[i:i + n]
            i += n
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("bad wire type")
        yield num, wire, v


def ints(wire, v):
    if wire == 0:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = varint(v, i)
        out.append(x)
    return out


def signed(x):
    return x - (1 << 64) if x >= 1 << 63 else x


def parse_profile(data):
    """{types, default, samples: [(values, [function names])], time, duration}"""
    raw = gzip.decompress(data)
    strs, types, samples, locs, funcs = [], [], [], {}, {}
    p = {"time": 0, "duration": 0, "default": 0}
    for num, wire, v in fields(raw):
        if num == 6:
            strs.append(v.decode())
        elif num == 1:
            types.append(dict((n, x) for n, _, x in fields(v)))
        elif num == 2:
            ids, vals = [], []
            for n, w, x in fields(v):
                if n == 1:
                    ids += ints(w, x)
                elif n == 2:
                    vals += [signed(y) for y in ints(w, x)]
            samples.append((vals, ids))
        elif num == 4:
            d = {"func": 0}
            for n, w, x in fields(v):
                if n == 1:
                    d["id"] = x
                elif n == 3:
                    d["addr"] = x
                elif n == 4:
                    for m, _, y in fields(x):
                        if m == 1:
                            d["func"] = y
            locs[d["id"]] = d
        elif num == 5:
            d = dict((n, x) for n, w, x in fields(v) if w == 0)
            funcs[d[1]] = d.get(2, 0)
        elif num == 9:
            p["time"] = v
        elif num == 10:
            p["duration"] = v
        elif num == 14:
            p["default"] = v
    p["types"] = [strs[t[1]] for t in types]
    p["default"] = strs[p["default"]]

    def name(loc_id):
        f = locs[loc_id]["func"]
        return strs[funcs[f]] if f in funcs else ""
    p["samples"] = [(vals, [name(i) for i in ids]) for vals, ids in samples]
    return p


def site_values(p, func, type_name):
    k = p["types"].index(type_name)
    return sum(vals[k] for vals, names in p["samples"] if func in names)


# ---- the program under test -----------------------------------------------

class Target:
    def __init__(self, args=(), env=None, http="127.0.0.1:0", serving=True):
        self.port_file = os.path.join(TMP, "port.%d" % random.randrange(1 << 30))
        e = dict(os.environ, PROFMALLOC_SAMPLE_RATE="16k")
        if http:
            e["PROFMALLOC_HTTP"] = http
            e["PROFMALLOC_HTTP_PORT_FILE"] = self.port_file
        e.update(env or {})
        self.p = subprocess.Popen([TARGET] + list(args), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, text=True)
        self.lines = []
        line = self.readline()
        if line.startswith("ipv6 "):  # api mode: the server on [::1] first
            self.ipv6 = line.split()
            if self.ipv6[1] != "unavailable":
                c = HTTPConnection("::1", int(self.ipv6[1]), timeout=10)
                c.request("GET", "/debug/profmalloc/stats")
                r = c.getresponse()
                self.ipv6.append(r.status)
                r.read()
                c.close()
                self.send("next")
            line = self.readline()
        if line.startswith("port "):
            self.port = int(line.split()[1])
            line = self.readline()
        elif serving:
            with open(self.port_file) as f:
                self.port = int(f.read())
        assert line.startswith("site "), line
        self.site = int(line.split()[1], 16)
        assert self.readline() == "ready"

    def readline(self):
        line = self.p.stdout.readline().strip()
        self.lines.append(line)
        return line

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def finish(self, timeout=10):
        self.p.stdin.close()
        rc = self.p.wait(timeout)
        err = self.p.stderr.read()
        assert rc == 0, "exit %d, stderr %s" % (rc, err)
        return err

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def get(port, path, method="GET", body=None, headers=None, timeout=20):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def raw(port, payload, timeout=10, shut=True):
    """Sends payload as is; returns (status or None, seconds taken)."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:  # the server may answer (and close) before it has read everything
            s.sendall(payload)
            if shut:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    status = int(data.split(b" ")[1]) if data.startswith(b"HTTP/1.1 ") else None
    return status, time.monotonic() - t0


# ---- the tests --------------------------------------------------------------

def test_index(t):
    for path in ("/debug/pprof/", "/debug/pprof"):
        st, h, body = get(t.port, path)
        assert st == 200 and h["content-type"].startswith("text/html"), (st, h)
        for link in (b"heap?debug=1", b"allocs?debug=1", b"peak?debug=1", b"/debug/profmalloc/stats",
                     b"/debug/profmalloc/timeline"):
            assert link in body, link
    st, h, body = get(t.port, "/debug/pprof/", method="HEAD")
    assert st == 200 and body == b"" and int(h["content-length"]) > 100


def test_heap(t):
    for q in ("", "?gc=1"):
        st, h, body = get(t.port, "/debug/pprof/heap" + q)
        assert st == 200 and h["content-type"] == "application/octet-stream", (st, h)
        assert 'filename="heap"' in h["content-disposition"]
        assert int(h["content-length"]) == len(body)
        p = parse_profile(body)
        assert p["types"] == ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"], p["types"]
        assert p["default"] == "inuse_space"
        assert site_values(p, "http_leaky_site", "inuse_space") > 0
        assert site_values(p, "http_held_site", "inuse_space") > 0


def test_heap_debug1(t):
    st, h, body = get(t.port, "/debug/pprof/heap?debug=1")
    assert st == 200 and h["content-type"].startswith("text/plain")
    assert body.startswith(b"heap profile:") and b"@ heap_v2/16384" in body.split(b"\n")[0], body[:80]


def test_allocs(t):
    st, h, body = get(t.port, "/debug/pprof/allocs")
    assert st == 200 and 'filename="allocs"' in h["content-disposition"]
    p = parse_profile(body)
    assert p["default"] == "alloc_space"
    assert p["types"] == ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]
    assert site_values(p, "http_leaky_site", "alloc_space") >= site_values(p, "http_leaky_site", "inuse_space") > 0
    assert all(v[0] >= v[2] and v[1] >= v[3] for v, _ in p["samples"])  # allocated >= in use
    # a scraper's schedule: each scrape a whole profile, cumulative counts never falling
    last_time, last_total = 0, 0
    for _ in range(5):
        st, _, body = get(t.port, "/debug/pprof/allocs")
        p = parse_profile(body)
        total = sum(v[1] for v, _ in p["samples"])
        assert st == 200 and p["time"] > last_time and total >= last_total, (p["time"], total)
        last_time, last_total = p["time"], total
        time.sleep(0.1)


def test_heap_seconds_delta(t):
    _, _, body = get(t.port, "/debug/pprof/heap")
    before = parse_profile(body)
    out = {}

    def fetch():
        out["r"] = get(t.port, "/debug/pprof/heap?seconds=2")
    th = threading.Thread(target=fetch)
    t0 = time.monotonic()
    th.start()
    time.sleep(0.5)
    t.send("release")  # the held blocks go during the window
    assert t.readline() == "released"
    th.join(30)
    took = time.monotonic() - t0
    st, h, body = out["r"]
    assert st == 200 and 'filename="heap-delta"' in h["content-disposition"], (st, h)
    d = parse_profile(body)
    assert 1.9e9 <= d["duration"] <= 3e9 and 1.9 <= took < 10, (d["duration"], took)
    held = site_values(d, "http_held_site", "inuse_space")
    assert held < 0 and -held >= site_values(before, "http_held_site", "inuse_space") // 2, held
    assert site_values(d, "http_held_site", "alloc_space") == 0  # nothing new allocated there
    leak = site_values(d, "http_leaky_site", "alloc_space")
    _, _, body = get(t.port, "/debug/pprof/heap")
    after = parse_profile(body)
    total = site_values(after, "http_leaky_site", "alloc_space")
    assert 0 < leak < total, (leak, total)
    st, h, body = get(t.port, "/debug/pprof/allocs?seconds=1")
    d = parse_profile(body)
    assert st == 200 and 'filename="allocs-delta"' in h["content-disposition"] and d["default"] == "alloc_space"
    assert 0 < site_values(d, "http_leaky_site", "alloc_space") < site_values(after, "http_leaky_site", "alloc_space")
    for q in ("0", "-1", "x", "", "99999"):
        st, _, body = get(t.port, "/debug/pprof/heap?seconds=" + q)
        assert st == 400 and b"seconds" in body, (q, st)
    st, _, body = get(t.port, "/debug/pprof/heap?seconds=1&debug=1")
    assert st == 400 and b"incompatible" in body


def test_peak(t):
    t.send("peak")  # http_peak_site takes 48 MiB and frees it
    while t.readline() != "peaked":
        pass
    st, h, body = get(t.port, "/debug/pprof/peak")
    assert st == 200 and 'filename="peak"' in h["content-disposition"], (st, h)
    p = parse_profile(body)
    assert p["default"] == "inuse_space", p["default"]
    by_func = {}  # each sample's innermost function of the program's own
    for vals, names in p["samples"]:
        own = [n for n in names if n.startswith("http_")]
        if own:
            by_func[own[0]] = by_func.get(own[0], 0) + vals[p["types"].index("inuse_space")]
    top = max(by_func, key=by_func.get)
    assert top == "http_peak_site" and by_func[top] >= 40 << 20, by_func
    # freed since: gone from the live heap, kept in the peak
    st, _, body = get(t.port, "/debug/pprof/heap")
    assert site_values(parse_profile(body), "http_peak_site", "inuse_space") < by_func[top] // 10
    st, h, body = get(t.port, "/debug/pprof/peak?debug=1")
    assert st == 200 and h["content-type"].startswith("text/plain")
    assert body.startswith(b"heap profile:"), body[:80]
    assert int(body.split(b"\n")[0].split()[3]) >= 40 << 20, body[:80]  # the peak's in-use bytes
    st, _, body = get(t.port, "/debug/pprof/peak?seconds=5")
    assert st == 400 and b"seconds" in body, (st, body)
    st, _, _ = get(t.port, "/debug/pprof/peak", method="POST", body=b"")
    assert st == 405, st


def test_timeline_absent(t):
    st, h, body = get(t.port, "/debug/profmalloc/timeline")
    assert st == 404 and b"PROFMALLOC_TIMELINE" in body, (st, body)


def test_timeline():
    path = os.path.join(TMP, "timeline.%p")
    t = Target(env={"PROFMALLOC_TIMELINE": path, "PROFMALLOC_TIMELINE_INTERVAL": "20"})
    try:
        deadline = time.monotonic() + 10
        while True:  # the file starts at the first record
            st, h, body = get(t.port, "/debug/profmalloc/timeline")
            lines = body.decode().split("\n")
            if st == 200 and sum(1 for l in lines if l.startswith("R ")) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert st == 200 and h["content-type"].startswith("text/plain"), (st, body[:200])
        head = lines[0].split()
        assert head[:2] == ["profmalloc-timeline", "1"] and head[2] == "pid=%d" % t.p.pid, lines[0]
        assert body.endswith(b"\n"), body[-80:]  # complete records only
        recs = [l.split() for l in lines if l.startswith("R ")]
        assert len(recs) >= 3 and all(len(r) >= 10 for r in recs), recs[:3]
        times = [int(r[1]) for r in recs]
        assert times == sorted(times) and int(recs[-1][2]) > 0, times
        with open(path.replace("%p", str(t.p.pid)), "rb") as f:
            assert f.read().startswith(body)  # the file's content, as far as it went
        t.finish()
    finally:
        t.kill()


def test_symbol(t):
    st, h, body = get(t.port, "/debug/pprof/symbol")
    assert st == 200 and body == b"num_symbols: 1\n", body
    a = t.site + 4  # inside http_leaky_site
    q = "0x%x+junk+0x0+0x%x" % (a, t.site)
    st, _, body = get(t.port, "/debug/pprof/symbol", method="POST", body=q.encode(),
                      headers={"Content-Type": "text/plain"})
    lines = body.decode().splitlines()
    assert st == 200 and lines == ["num_symbols: 1", "0x%x http_leaky_site" % a,
                                   "0x%x http_leaky_site" % t.site], lines
    st, _, body = get(t.port, "/debug/pprof/symbol?0x%x" % a)
    assert body.decode().splitlines()[1:] == ["0x%x http_leaky_site" % a], body
    # a large request: curl and pprof send Expect: 100-continue; all answered
    many = "+".join("0x%x" % (t.site + i) for i in range(0, 4000, 4)).encode()
    st, _, body = get(t.port, "/debug/pprof/symbol", method="POST", body=many,
                      headers={"Expect": "100-continue"})
    assert st == 200 and body.count(b" http_leaky_site\n") >= 10, body[:200]


def test_stats(t):
    names = ["in_use", "requested", "mapped", "resident_estimate", "thread_cache",
             "central_cache", "fragmentation", "pageheap_free", "released", "metadata",
             "threads", "lock_contention", "sample_rate", "samples_live"]
    st, h, body = get(t.port, "/debug/profmalloc/stats")
    assert st == 200 and h["content-type"].startswith("text/plain")
    text = dict(l.split(": ") for l in body.decode().splitlines())
    assert list(text) == names, text
    st, h, body = get(t.port, "/debug/profmalloc/stats?format=json")
    assert st == 200 and h["content-type"] == "application/json"
    js = json.loads(body)
    assert list(js) == names and 0 < js["in_use"] <= js["mapped"] and js["sample_rate"] == 16384, js
    assert js["threads"] >= 3


def test_go_tool_pprof(t):
    if not shutil.which("go"):
        print("  skipped: go is not installed (apt-get install golang-go)")
        return
    env = dict(os.environ, PPROF_TMPDIR=TMP, HOME=TMP)
    env.pop("LD_PRELOAD", None)
    for extra, path in (([], "heap"), (["-symbolize=remote"], "allocs")):
        r = subprocess.run(["go", "tool", "pprof", "-top"] + extra +
                           ["http://127.0.0.1:%d/debug/pprof/%s" % (t.port, path)],
                           capture_output=True, text=True, env=env, timeout=120)
        out = r.stdout + r.stderr
        assert r.returncode == 0 and "http_leaky_site" in out, out
        assert "symbolz" not in out.lower() and "failed" not in out.lower(), out


def test_errors_and_fuzz(t):
    cases = [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /debug/pprof/heap HTTP/2.0\r\n\r\n", 505),
        (b"GET /debug/pprof/heap FOO/1.1\r\n\r\n", 400),
        (b"GET nopath HTTP/1.1\r\n\r\n", 400),
        (b"GET /debug/pprof/ HTTP/1.1\r\nNoColonHere\r\n\r\n", 400),
        (b"GET /debug/pprof/ HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
        (b"GET /debug/pprof/ HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400),
        (b"POST /debug/pprof/symbol HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400),
        (b"POST /debug/pprof/symbol HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab", 400),
        (b"POST /debug/pprof/symbol HTTP/1.1\r\nContent-Length: 100000\r\n\r\n", 413),
        (b"POST /debug/pprof/symbol HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413),
        (b"POST /debug/pprof/symbol HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
        (b"GET /debug/pprof/ HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(70)) + b"\r\n", 431),
        (b"GET /debug/pprof/ HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
        (b"GET /debug/pprof/nothing HTTP/1.1\r\n\r\n", 404),
        (b"GET /etc/passwd HTTP/1.1\r\n\r\n", 404),
        (b"PUT /debug/pprof/heap HTTP/1.1\r\n\r\n", 405),
        (b"GET /debug/pprof/heap?debug=%zz HTTP/1.1\r\n\r\n", 400),
        (b"POST /debug/pprof/symbol HTTP/1.1\r\nContent-Length: 50\r\n\r\n0x1", 400),  # truncated body
        (b"GET /debug/pprof/ HTTP/1.0\r\n\r\n", 200),
        (b"GET /debug/pprof/ HTTP/1.1\n\n", 200),
    ]
    for payload, want in cases:
        st, took = raw(t.port, payload)
        assert st == want and took < 2, (payload[:60], st, want, took)
    # truncated headers: the client goes away, the server just closes
    st, took = raw(t.port, b"GET /debug/pprof/heap HTTP/1.1\r\nHost: x\r\n")
    assert st is None and took < 2
    rng = random.Random(29)
    ok = {400, 404, 405, 413, 431, 501, 505, None}
    for i in range(300):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600)))
        if i % 3 == 0:
            junk = b"GET /debug/pprof/" + junk
        st, took = raw(t.port, junk + (b"\r\n\r\n" if i % 2 else b""))
        assert st in ok and took < 2, (junk[:40], st, took)
    assert t.p.poll() is None, "the program died"
    st, _, body = get(t.port, "/debug/pprof/heap")
    assert st == 200 and site_values(parse_profile(body), "http_leaky_site", "alloc_space") > 0


def test_slowloris(t):
    s = socket.create_connection(("127.0.0.1", t.port), timeout=20)
    t0 = time.monotonic()
    closed_at = None
    data = b""
    for c in b"GET /debug/pprof/heap HTTP/1.1\r\nX: " + b"z" * 40:
        try:
            s.send(bytes([c]))
            time.sleep(0.25)
            s.setblocking(False)
            try:
                chunk = s.recv(4096)
                data += chunk
                if data and closed_at is None:
                    closed_at = time.monotonic() - t0
                    break
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.monotonic() - t0
            break
    s.close()
    assert data.startswith(b"HTTP/1.1 408"), data[:40]
    assert closed_at is not None and 2.5 < closed_at < 5, closed_at
    # an idle connection holds the server for the timeout only, then others are served
    idle = socket.create_connection(("127.0.0.1", t.port))
    t0 = time.monotonic()
    st, _, _ = get(t.port, "/debug/profmalloc/stats")
    waited = time.monotonic() - t0
    idle.close()
    assert st == 200 and waited < 5, waited


def test_loopback_by_default(t):
    port_hex = ":%04X" % t.port
    with open("/proc/%d/net/tcp" % t.p.pid) as f:
        rows = [l.split() for l in f.readlines()[1:]]
    listening = [r for r in rows if r[1].endswith(port_hex) and r[3] == "0A"]
    assert listening and listening[0][1] == "0100007F" + port_hex, listening


def test_fork_child_does_not_serve(t):
    out = {}

    def fetch():  # a request in flight across the fork
        try:
            out["r"] = get(t.port, "/debug/pprof/heap?seconds=3")
        except Exception as e:
            out["r"] = e
    th = threading.Thread(target=fetch)
    th.start()
    time.sleep(0.3)
    t.send("fork")
    got = {}
    while len(got) < 2:
        line = t.readline()
        got[line.split()[0]] = line
    child_port = int(got["child"].split()[1])
    assert child_port > 0 and child_port != t.port
    # the parent stopped; had the child kept the inherited socket open,
    # this connection would be accepted into its backlog instead
    try:
        socket.create_connection(("127.0.0.1", t.port), timeout=2).close()
        assert False, "the old port still accepts connections"
    except ConnectionRefusedError:
        pass
    th.join(10)
    assert not th.is_alive()
    st, _, body = get(child_port, "/debug/pprof/heap")
    assert st == 200 and site_values(parse_profile(body), "http_held_site", "inuse_space") > 0
    t.p.stdin.close()
    assert t.readline() == "child exit 0", t.lines
    assert t.p.wait(10) == 0


def test_exit_with_request_in_flight(t):
    out = {}

    def fetch():
        t0 = time.monotonic()
        try:
            out["r"] = get(t.port, "/debug/pprof/heap?seconds=30")
        except Exception as e:
            out["r"] = e
        out["took"] = time.monotonic() - t0
    th = threading.Thread(target=fetch)
    th.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    t.finish(timeout=10)
    exited = time.monotonic() - t0
    th.join(10)
    assert exited < 3 and out["took"] < 5, (exited, out)
    assert isinstance(out["r"], Exception), out  # cut short: no profile


def test_api_start_stop():
    t = Target(args=["api"], http=None, serving=False)
    try:
        if t.ipv6[1] == "unavailable":
            print("  [::1] not tested: no IPv6 loopback here (errno %s)" % t.ipv6[2])
        else:
            assert t.ipv6[2] == 200, t.ipv6
        st, _, body = get(t.port, "/debug/pprof/heap")
        assert st == 200 and site_values(parse_profile(body), "http_held_site", "inuse_space") > 0
        t.finish()
    finally:
        t.kill()


def test_malformed_variable():
    t = Target(http="not-an-address", serving=False)
    try:
        err = t.finish()
        assert "PROFMALLOC_HTTP: cannot serve on not-an-address (malformed address)" in err, err
        assert not os.path.exists(t.port_file)
    finally:
        t.kill()


PER_TARGET = [test_index, test_heap, test_heap_debug1, test_allocs, test_heap_seconds_delta,
              test_symbol, test_stats, test_go_tool_pprof, test_errors_and_fuzz, test_slowloris,
              test_loopback_by_default, test_peak, test_timeline_absent]
OWN_TARGET = [test_fork_child_does_not_serve, test_exit_with_request_in_flight]
ALONE = [test_api_start_stop, test_malformed_variable, test_timeline]


def main():
    only = set(sys.argv[2:])
    failed = 0
    t = Target()
    try:
        for fn in PER_TARGET + OWN_TARGET + ALONE:
            if only and fn.__name__ not in only:
                continue
            t0 = time.monotonic()
            try:
                if fn in PER_TARGET:
                    fn(t)
                elif fn in OWN_TARGET:
                    own = Target()
                    try:
                        fn(own)
                    finally:
                        own.kill()
                else:
                    fn()
                print("[ OK ] %s (%.1f s)" % (fn.__name__, time.monotonic() - t0))
            except Exception as e:
                failed += 1
                print("[FAIL] %s: %r" % (fn.__name__, e))
        assert t.p.poll() is None, "the program died"
        t.finish()
    finally:
        t.kill()
        shutil.rmtree(TMP, ignore_errors=True)
    print("test_http: %d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

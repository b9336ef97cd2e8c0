#!/usr/bin/env python3
"""test_cli.py — the profmalloc command end to end, on profiles written by
test/cli/sites.c (known sites, PROFMALLOC_SAMPLE_RATE=1 so every number is
exact): top's names, file:line (against the program's own __LINE__, and
against addr2line when binutils is installed) and bytes for a PIE, a
non-PIE, a shared library and stripped binaries with separate debug files;
diff, stats, convert, flame (parsed with xml.etree), run on programs that
fork and exec, exit codes, corrupt and truncated inputs, --help, colour.
Usage: test_cli.py --build DIR [TEST...]"""
import gzip, json, os, pty, random, re, select, shutil, subprocess, sys, tempfile, time
import xml.etree.ElementTree as ET

BUILD = os.path.abspath(sys.argv[sys.argv.index('--build') + 1])
PM = os.path.join(BUILD, 'profmalloc')
LIB = os.path.join(BUILD, 'libprofmalloc.so')
T = os.path.join(BUILD, 'test', 'cli')
DEBUG_DIR = os.path.join(T, 'debug')
OUT = os.path.join(T, 'out')
failures = []


def run(args, env=None, check=None, timeout=60, input=None, cwd=None):
    e = dict(os.environ)
    e.pop('NO_COLOR', None)
    if env:
        e.update(env)
    # errors='replace': a corrupt profile's names reach the output as they are
    r = subprocess.run(args, env=e, capture_output=True, text=True, errors='replace', timeout=timeout,
                       input=input, cwd=cwd)
    if check is not None and r.returncode != check:
        raise AssertionError('%s: exit %d (want %d)\nstdout: %s\nstderr: %s' %
                             (' '.join(args), r.returncode, check, r.stdout[-2000:], r.stderr[-2000:]))
    return r


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def profile_of(variant, extra=()):
    """Runs sites_<variant> under the preload; returns (dir, expected sites)."""
    d = os.path.join(OUT, variant)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    r = run([os.path.join(T, 'sites_' + variant), d] + list(extra), check=0,
            env={'LD_PRELOAD': LIB, 'PROFMALLOC_SAMPLE_RATE': '1',
                 'PROFMALLOC_DUMP': os.path.join(d, 'exit.pb.gz')})
    sites = {}
    for line in r.stdout.splitlines():
        _, name, ln, live = line.split()
        sites[name] = (int(ln), int(live))
    return d, sites


def top_json(path, *opts):
    r = run([PM, 'top', path, '--json', '-n', '0', '--debug-dir', DEBUG_DIR] + list(opts), check=0)
    return json.loads(r.stdout)


def addr2line(obj, addr):
    r = run(['addr2line', '-f', '-e', obj, addr], check=0)
    func, where = r.stdout.splitlines()[:2]
    f, _, ln = where.rpartition(':')
    ln = re.sub(r'\s.*', '', ln)
    return func, os.path.basename(f), int(ln) if ln.isdigit() else 0


def check_sites(path, sites, debug_for=None, exact=True, index=()):
    j = top_json(path, '--lines', *index)
    got = {s['function']: s for s in j['sites']}
    for name, (line, live) in sites.items():
        if live == 0:
            expect(name not in got, '%s: %s holds nothing at the dump but is listed' % (path, name))
            continue
        expect(name in got, '%s: site %s missing: %s' % (path, name, sorted(got)))
        s = got[name]
        expect(s['file'] and os.path.basename(s['file']) in ('sites.c', 'sites_lib.c'),
               '%s: %s file %s' % (path, name, s['file']))
        expect(s['line'] == line, '%s: %s line %s, want %d' % (path, name, s['line'], line))
        if exact:
            expect(s['value'] == live, '%s: %s holds %s, want %d' % (path, name, s['value'], live))
        if shutil.which('addr2line') and s.get('object'):
            obj = s['object']
            if debug_for and os.path.basename(obj).startswith('sites_'):
                obj = debug_for
            func, f, ln = addr2line(obj, s['address'])
            expect(func == name and f == os.path.basename(s['file']) and ln == s['line'],
                   '%s: %s at %s:%s but addr2line says %s %s:%s' % (path, name, s['file'], s['line'], func, f, ln))
    return j


def debug_file_of(variant):
    if variant == 'debuglink':
        return os.path.join(T, 'sites_debuglink.debug')
    if variant == 'buildid':
        for root, _, files in os.walk(DEBUG_DIR):
            for f in files:
                if f.endswith('.debug'):
                    p = os.path.join(root, f)
                    r = run(['sh', '-c', 'readelf -Wn "$0" 2>/dev/null; readelf -Wn "$1" 2>/dev/null', p,
                             os.path.join(T, 'sites_buildid')])
                    ids = re.findall(r'Build ID: (\w+)', r.stdout)
                    if len(ids) == 2 and ids[0] == ids[1]:
                        return p
    return None


# ---- top ---------------------------------------------------------------------

def top_variant(variant):
    d, sites = profile_of(variant)
    dbg = debug_file_of(variant)
    for f in ('before.pb.gz', 'before.heap'):
        check_sites(os.path.join(d, f), sites, dbg)


def test_top_pie(): top_variant('pie')
def test_top_nopie(): top_variant('nopie')
def test_top_stripped_debuglink(): top_variant('debuglink')
def test_top_stripped_buildid(): top_variant('buildid')


def test_top_stripped_without_debug_file_falls_back():
    """Without its debug file, a stripped binary's sites keep the names the
    profile carries (none for a fully stripped one: shown as addresses)."""
    d, sites = profile_of('buildid')
    j = top_json(os.path.join(d, 'before.pb.gz'), '--lines', '--debug-dir', '/nonexistent')
    names = [s['function'] for s in j['sites']]
    expect('lib_site' in names, 'the shared library is still symbolized: %s' % names)
    expect('leak_site' not in names, 'no symbols without the debug file, yet %s' % names)


def test_top_alloc_and_objects():
    d, sites = profile_of('pie')
    j = top_json(os.path.join(d, 'before.pb.gz'), '--alloc', '--lines')
    got = {s['function']: s for s in j['sites']}
    expect(got['churn_site']['value'] == 400000, 'churn_site allocated %s' % got['churn_site']['value'])
    expect(got['churn_site']['line'] == sites['churn_site'][0], 'churn_site line')
    j = top_json(os.path.join(d, 'before.pb.gz'), '--objects')
    got = {s['function']: s for s in j['sites']}
    expect(got['leak_site']['value'] == 3, 'leak_site objects %s' % got['leak_site']['value'])


def test_top_cum():
    """--cum charges every function on a stack once: main holds what its
    callees allocated, each site function what it did, none more than the
    total."""
    d, sites = profile_of('pie')
    j = top_json(os.path.join(d, 'before.pb.gz'), '--cum')
    got = {s['function']: s['value'] for s in j['sites']}
    below = sum(live for name, (line, live) in sites.items())
    expect(got['main'] >= below, 'main %s >= its sites %s' % (got['main'], below))
    for name, (line, live) in sites.items():
        if live:
            expect(got[name] == live, '%s cum %s, want %s' % (name, got.get(name), live))
    expect(all(v <= j['total'] for v in got.values()), 'no function above the total')
    flat = top_json(os.path.join(d, 'before.pb.gz'))
    expect(flat['total'] == j['total'], 'the same total')


def test_top_human_output():
    d, _ = profile_of('pie')
    r = run([PM, 'top', os.path.join(d, 'before.pb.gz'), '-n', '3'], check=0)
    lines = r.stdout.splitlines()
    for l in lines:
        expect(len(l) <= 80, 'line longer than 80 columns: %r' % l)
    expect('\033[' not in r.stdout, 'colour codes in output that is not a terminal')
    expect(r.stderr == '', 'nothing on stderr when symbolizing is quick: %r' % r.stderr)
    expect(re.search(r'leak_site\s+\S*sites\.c:\d+', r.stdout), r.stdout)
    expect(lines[-1].split()[-1] != '' and 'total' in lines[-1], 'total line: %r' % lines[-1])
    expect('more sites' in r.stdout, '-n 3 says how many were left out')
    shares = [float(m) for m in re.findall(r'(\d+\.\d)%', r.stdout)]
    expect(shares == sorted(shares, reverse=True), 'sorted by share: %s' % shares)


def test_top_stderr():
    """A sampled profile: each site's standard error is about
    value * sqrt((1 - p) / samples), and the estimate is within a few of
    them of the truth (2 000 000 bytes at one site)."""
    d = os.path.join(OUT, 'many')
    os.makedirs(d, exist_ok=True)
    for seed in range(3):
        path = os.path.join(d, 'many%d.pb.gz' % seed)
        run([os.path.join(T, 'sites_pie'), 'many'], check=0,
            env={'LD_PRELOAD': LIB, 'PROFMALLOC_SAMPLE_RATE': '16384', 'PROFMALLOC_DUMP': path})
        j = top_json(path)
        s = [x for x in j['sites'] if x['function'] == 'main'][0]
        # 100-byte blocks (112 with the class) at R = 16384: p = 1 - e^(-size/R)
        expect(s['samples'] > 40, 'samples behind the site: %s' % s['samples'])
        rel = s['stderr'] / s['value']
        expect(0.7 / s['samples'] ** 0.5 < rel < 1.3 / s['samples'] ** 0.5,
               'relative error %.3f for %d samples' % (rel, s['samples']))
        expect(abs(s['value'] - 2000000) < 5 * s['stderr'] + 240000,
               'estimate %d vs 2000000 (stderr %d)' % (s['value'], s['stderr']))
        r = run([PM, 'top', path], check=0)
        expect('std.err' in r.stdout and '±' in r.stdout and 'sampled every 16.0 KiB' in r.stdout, r.stdout)


def test_top_gzip_real_deflate_and_raw():
    """A profile recompressed with real deflate (python's gzip, level 9) and
    one not compressed at all read the same as the library's own file."""
    d, _ = profile_of('pie')
    src = os.path.join(d, 'before.pb.gz')
    raw = gzip.decompress(open(src, 'rb').read())
    open(os.path.join(d, 'deflate.pb.gz'), 'wb').write(gzip.compress(raw, 9))
    open(os.path.join(d, 'raw.pb'), 'wb').write(raw)
    # two members, as gzip(1) concatenates them
    want = top_json(src)['sites']
    for f in ('deflate.pb.gz', 'raw.pb'):
        got = top_json(os.path.join(d, f))['sites']
        expect(got == want, '%s differs from the original' % f)


# ---- diff --------------------------------------------------------------------

def test_diff_finds_the_leak():
    d, sites = profile_of('pie')
    for ext in ('pb.gz', 'heap'):
        a, b = os.path.join(d, 'before.' + ext), os.path.join(d, 'after.' + ext)
        r = run([PM, 'diff', a, b, '--json', '--lines', '--debug-dir', DEBUG_DIR], check=0)
        j = json.loads(r.stdout)
        expect(len(j['sites']) == 1, 'only the leak changed: %s' % j['sites'])
        s = j['sites'][0]
        expect(s['function'] == 'leak_site' and s['delta'] == 200000 and s['line'] == sites['leak_site'][0], s)
        expect(j['delta'] == 200000, j)
        r = run([PM, 'diff', a, b], check=0)
        expect(re.search(r'\+195 KiB .*leak_site', r.stdout), r.stdout)
        expect(all(len(l) <= 80 for l in r.stdout.splitlines() if d not in l),
               'diff fits 80 columns (but for the file names)')
        r = run([PM, 'diff', a, b, '--fail-on-growth', '100k'])
        expect(r.returncode == 1 and 'grew by' in r.stderr, 'fail-on-growth 100k: %d %s' % (r.returncode, r.stderr))
        run([PM, 'diff', a, b, '--fail-on-growth', '300000'], check=0)
        r = run([PM, 'diff', a, b, '--base'], check=0)
        expect(re.search(r'195 KiB .*100\.0%\s+leak_site', r.stdout), r.stdout)
        r = run([PM, 'diff', b, a, '--json'], check=0)
        expect(json.loads(r.stdout)['delta'] == -200000, 'reversed diff shrinks')


# ---- stats -------------------------------------------------------------------

def test_go_heap_profile():
    """A heap profile written by Go's runtime/pprof (test/prof/goheap): its
    allocation site is main.main at the line of its make()."""
    if not shutil.which('go'):
        print('  (no go: skipped)')
        return
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = os.path.join(root, 'test', 'prof', 'goheap', 'main.go')
    d = os.path.join(OUT, 'go')
    os.makedirs(d, exist_ok=True)
    r = run(['go', 'build', '-o', os.path.join(d, 'goheap'), src], timeout=240,
            env={'GOCACHE': os.path.join(BUILD, 'test', 'gocache'), 'GOFLAGS': '-mod=mod'})
    if r.returncode != 0:
        print('  (go build failed, skipped: %s)' % r.stderr.strip()[-200:])
        return
    prof = os.path.join(d, 'go-heap.pb.gz')
    run([os.path.join(d, 'goheap'), prof], check=0)
    line = [i + 1 for i, l in enumerate(open(src)) if 'make([]byte' in l][0]
    j = top_json(prof, '--alloc', '--lines')
    s = j['sites'][0]
    expect(s['function'] == 'main.main' and s['file'].endswith('main.go') and s['line'] == line, s)
    expect(j['period'] == 512 * 1024 and s['samples'] >= 1 and s['stderr'] > 0, j)


def test_progress_line_when_symbolizing_is_slow():
    """Symbolizing that takes over a second shows a progress line on
    stderr: the profile's first mapping is a FIFO that this test opens
    only after 1.3 s, so reading the objects takes that long."""
    d = os.path.join(OUT, 'progress')
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    fifo = os.path.join(d, 'slow-object')
    os.mkfifo(fifo)
    exe = os.path.join(T, 'sites_pie')
    prof = os.path.join(d, 'p.heap')
    open(prof, 'w').write('heap profile:      2:      200 [     2:      200] @ heapprofile\n'
                          '     1:      100 [     1:      100] @ 0x10000100\n'
                          '     1:      100 [     1:      100] @ 0x20001100\n\nMAPPED_LIBRARIES:\n'
                          '10000000-10001000 r-xp 00000000 00:00 0 %s\n'
                          '20000000-20010000 r-xp 00000000 00:00 0 %s\n' % (fifo, exe))
    p = subprocess.Popen([PM, 'top', prof], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.3)
    w = os.open(fifo, os.O_WRONLY)
    os.close(w)
    out, err = p.communicate(timeout=30)
    expect(p.returncode == 0 and 'symbolizing' in err and exe in err, 'progress on stderr: %r' % err)
    expect('symbolizing' not in out, 'not on stdout')


def test_cxx_names_demangled():
    """A C++ program's sites show demangled, charged to the method that
    called operator new rather than to operator new."""
    cxx = shutil.which('g++')
    if not cxx:
        print('  (no g++: skipped)')
        return
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.path.join(OUT, 'cxx')
    os.makedirs(d, exist_ok=True)
    exe = os.path.join(d, 'cxx_sites')
    run([cxx, '-O1', '-g', '-fno-omit-frame-pointer', os.path.join(here, 'cxx_sites.cpp'), '-o', exe], check=0,
        timeout=120)
    prof = os.path.join(d, 'cxx.pb.gz')
    r = run([exe], check=0, env={'LD_PRELOAD': LIB, 'PROFMALLOC_SAMPLE_RATE': '1', 'PROFMALLOC_DUMP': prof})
    want = {}
    for l in r.stdout.splitlines():
        name, _, line = l[5:].rpartition(' ')
        want[name] = int(line)
    j = top_json(prof, '--lines')
    got = {s['function']: s for s in j['sites']}
    for name, line in want.items():
        expect(name in got, '%s missing from %s' % (name, sorted(got)))
        if 'Cache()' not in name:  # the vector's inlined reserve() is the constructor's line
            expect(got[name]['line'] == line and got[name]['file'].endswith('cxx_sites.cpp'), got[name])
    expect(got['store::Cache::insert(char const*, unsigned long)']['value'] == 1000000, 'ten blocks of 100000')
    expect(not any(f.startswith('operator new') for f in got), 'operator new is not a site: %s' % sorted(got))
    r = run([PM, 'top', prof, '--lines'], check=0)
    expect(re.search(r'store::Cache::insert\(\.\.\.\)\s+\S*cxx_sites\.cpp:%d' % want['store::Cache::insert(char const*, unsigned long)'],
                     r.stdout), 'long C++ names shortened to fit: %s' % r.stdout)
    expect(all(len(l) <= 80 for l in r.stdout.splitlines()[1:]), 'fits 80 columns')


def varint(b, i):
    v, shift = 0, 0
    while True:
        v |= (b[i] & 0x7f) << shift
        shift += 7
        i += 1
        if b[i - 1] < 0x80:
            return v, i


def venc(v):
    out = b''
    while v >= 0x80:
        out += bytes([v & 0x7f | 0x80])
        v >>= 7
    return out + bytes([v])


def test_stats():
    d, _ = profile_of('pie')
    r = run([PM, 'stats', os.path.join(d, 'before.pb.gz'), '--json'], check=0)
    j = json.loads(r.stdout)
    a = j['allocator']
    expect(a['in_use'] >= j['sampled']['inuse_space'] > 0, j)
    expect(a['sample_rate'] == 1 and a['mapped'] >= a['in_use'], a)
    r = run([PM, 'stats', os.path.join(d, 'before.pb.gz')], check=0)
    expect(re.search(r'in_use\s+\S+ \S+\s+%d' % a['in_use'], r.stdout), r.stdout)
    expect(all(len(l) <= 80 for l in r.stdout.splitlines()), 'stats fits 80 columns')
    r = run([PM, 'stats', os.path.join(d, 'before.heap')], check=0)
    expect('no allocator totals' in r.stdout, r.stdout)
    # the totals travel in one comment; dumps from before carry one per value
    raw = gzip.decompress(open(os.path.join(d, 'before.pb.gz'), 'rb').read())
    fields, nstr, i = [], 0, 0
    while i < len(raw):
        key, i = varint(raw, i)
        if key & 7 == 2:
            n, j = varint(raw, i)
            fields.append((key, raw[i:j + n]))
            i = j + n
        else:
            _, j = varint(raw, i)
            fields.append((key, raw[i:j]))
            i = j
        nstr += key == (6 << 3 | 2)
    comments = [f for f in fields if f[0] == 13 << 3]
    expect(len(comments) == 1, 'one comment line, not %d' % len(comments))
    old = b''.join(bytes([k]) + v for k, v in fields if k != 13 << 3)
    for n, (k, v) in enumerate(sorted(a.items())):
        line = ('profmalloc: %s=%d bytes' % (k, v)).encode()
        old += bytes([6 << 3 | 2]) + venc(len(line)) + line + bytes([13 << 3]) + venc(nstr + n)
    open(os.path.join(d, 'old.pb'), 'wb').write(old)
    r = run([PM, 'stats', os.path.join(d, 'old.pb'), '--json'], check=0)
    expect(json.loads(r.stdout)['allocator'] == a, r.stdout)


# ---- convert -----------------------------------------------------------------

def test_convert_round_trip():
    d, sites = profile_of('pie')
    src = os.path.join(d, 'before.pb.gz')
    for a, b in (('c1.heap', 'c2.pb.gz'), ('c3.pb', 'c4.heap')):
        run([PM, 'convert', src, os.path.join(d, a)], check=0)
        run([PM, 'convert', os.path.join(d, a), os.path.join(d, b)], check=0)
        check_sites(os.path.join(d, a), sites)
        check_sites(os.path.join(d, b), sites)
    # a sampled profile keeps its estimates through legacy text, up to rounding
    path = os.path.join(OUT, 'many', 'many0.pb.gz')
    if os.path.exists(path):
        run([PM, 'convert', path, os.path.join(d, 'many.heap')], check=0)
        x, y = top_json(path), top_json(os.path.join(d, 'many.heap'))
        expect(abs(x['total'] - y['total']) <= 0.01 * x['total'], 'legacy keeps the estimate: %s %s' % (x['total'], y['total']))
    if shutil.which('google-pprof'):
        r = run(['google-pprof', '--text', os.path.join(T, 'sites_pie'), os.path.join(d, 'c1.heap')])
        expect('leak_site' in r.stdout, 'google-pprof reads the converted legacy text: %s' % r.stdout[-500:])


# ---- flame -------------------------------------------------------------------

def test_output_files_are_atomic():
    """convert, flame and timeline write a temporary file and rename it: a
    failure leaves neither half a file nor the temporary one."""
    d, _ = profile_of('pie')
    src = os.path.join(d, 'before.pb.gz')
    target = os.path.join(d, 'adir')
    os.makedirs(target, exist_ok=True)
    for args in (['convert', src, target], ['flame', src, '-o', target]):
        r = run([PM] + args)
        expect(r.returncode == 2 and r.stderr.startswith('profmalloc: '), '%s: %d %s' % (args[0], r.returncode, r.stderr))
        expect(os.path.isdir(target) and not [f for f in os.listdir(d) if '.tmp.' in f], 'nothing left behind')
    r = run([PM, 'convert', src, os.path.join(d, 'no', 'such', 'dir.heap')])
    expect(r.returncode == 2 and 'No such file' in r.stderr, r.stderr)
    good = os.path.join(d, 'good.heap')
    run([PM, 'convert', src, good], check=0)
    expect(open(good).read().startswith('heap profile:'), 'written when all went well')


def test_flame_svg():
    d, sites = profile_of('pie')
    src, svg = os.path.join(d, 'before.pb.gz'), os.path.join(d, 'flame.svg')
    run([PM, 'flame', src, '-o', svg], check=0)
    tree = ET.parse(svg)
    ns = {'s': 'http://www.w3.org/2000/svg'}
    root = tree.getroot()
    frames = []
    for g in root.iter('{http://www.w3.org/2000/svg}g'):
        if g.get('class') == 'f':
            title = g.find('s:title', ns).text
            frames.append((int(g.get('data-d')), float(g.get('data-x')), float(g.get('data-v')),
                           title.rsplit(' (', 1)[0]))
    total = top_json(src)['total']
    roots = [f for f in frames if f[0] == 0]
    expect(len(roots) == 1 and roots[0][2] == total, 'root %s, total %s' % (roots, total))
    expect(float(root.get('data-total')) == total, 'data-total')
    # children lie inside their parent and sum to at most its value
    for dep, x, v, name in frames:
        kids = [f for f in frames if f[0] == dep + 1 and x <= f[1] and f[1] + f[2] <= x + v + 0.5]
        expect(sum(k[2] for k in kids) <= v + 0.5, 'children of %s exceed it' % name)
    by = {}
    for f in frames:
        by[f[3]] = by.get(f[3], 0) + f[2]
    for name in ('leak_site', 'calloc_site', 'lib_site'):
        expect(by.get(name) == sites[name][1], '%s frame %s, want %s' % (name, by.get(name), sites[name][1]))
    text = open(svg).read()
    expect('<script' in text and 'http://' not in text.replace('http://www.w3.org', ''),
           'script inline, nothing fetched')
    if shutil.which('node'):
        flame_script(svg, root, sites)
    else:
        print('  (no node: the script is not exercised)')
    screenshot(svg, 'flame.png')
    browser_click(svg)


def browser():
    return next((b for b in ('chromium', 'chromium-browser', 'google-chrome') if shutil.which(b)), None)


def browser_click(svg):
    """In a real browser (headless Chromium, when installed): a click on
    leak_site's frame, dispatched by a script added to a copy of the file,
    zooms it to the full width and hides its siblings (--dump-dom)."""
    b = browser()
    if not b:
        return
    text = open(svg).read()
    click = ('<script type="text/ecmascript"><![CDATA[\nvar gs = document.querySelectorAll("g.f");\n'
             'for (var i = 0; i < gs.length; i++)\n'
             '  if (gs[i].querySelector("title").textContent.indexOf("leak_site (") == 0)\n'
             '    gs[i].dispatchEvent(new MouseEvent("click", {bubbles: true}));\n]]></script>\n</svg>')
    copy = svg + '.click.svg'
    open(copy, 'w').write(text.replace('</svg>', click))
    r = run([b, '--headless', '--disable-gpu', '--no-sandbox', '--dump-dom', 'file://' + copy], timeout=120)
    frames = re.findall(r'<g class="f"[^>]*?(?:style="([^"]*)")?><title>(\w+) \([^<]*</title><rect[^>]*?width="([\d.]+)"',
                        r.stdout)
    by = {name: (style, float(w)) for style, name, w in frames}
    expect('leak_site' in by and abs(by['leak_site'][1] - 1180) < 0.01, 'zoomed in the browser: %s' % (by.get('leak_site'),))
    expect('none' in by.get('calloc_site', ('', 0))[0], 'a sibling hidden: %s' % (by.get('calloc_site'),))
    print('  chromium: a click zooms leak_site to the full width')


def screenshot(svg, name):
    """A headless browser renders the SVG, when one is installed; the
    screenshot is kept in build/test/cli/out as the test's artefact."""
    for b in ('chromium', 'chromium-browser', 'google-chrome'):
        if shutil.which(b):
            png = os.path.join(OUT, name)
            if os.path.exists(png):
                os.unlink(png)
            run([b, '--headless', '--disable-gpu', '--no-sandbox', '--screenshot=' + png,
                 '--window-size=1200,600', 'file://' + svg], timeout=120)
            expect(os.path.exists(png) and os.path.getsize(png) > 1000, 'screenshot written')
            print('  screenshot kept in %s' % os.path.relpath(png))
            return
    print('  (no chromium installed: the SVG is not rendered)')


def test_flame_deep_stack():
    """A stack of 300000 frames (a crafted profile) is drawn cut to its
    innermost frames, not a crash in the recursive tree walk."""
    def vi(v):
        out = b''
        while v > 0x7f:
            out += bytes([v & 0x7f | 0x80])
            v >>= 7
        return out + bytes([v])
    def fld(n, payload):
        return vi(n << 3) + vi(payload) if isinstance(payload, int) else vi(n << 3 | 2) + vi(len(payload)) + payload
    sample = fld(1, vi(1) * 300000) + fld(2, vi(100))
    msg = (fld(1, fld(1, 1) + fld(2, 2)) + fld(2, sample) + fld(4, fld(1, 1) + fld(3, 0x401000)) +
           fld(6, b'') + fld(6, b'space') + fld(6, b'bytes'))
    d = tempfile.mkdtemp()
    src, svg = os.path.join(d, 'deep.pb.gz'), os.path.join(d, 'deep.svg')
    open(src, 'wb').write(gzip.compress(msg))
    run([PM, 'flame', src, '-o', svg], check=0)
    frames = [g for g in ET.parse(svg).getroot().iter('{http://www.w3.org/2000/svg}g') if g.get('class') == 'f']
    expect(1000 <= len(frames) <= 1100, 'the stack drawn cut to about 1024 frames: %d' % len(frames))
    shutil.rmtree(d)


def flame_script(svg, root, sites):
    """The SVG's own script, run by node against a stand-in DOM: hovering a
    frame shows its title, a click zooms it to the full width and hides
    what is not above or below it, Search highlights and measures."""
    S = '{http://www.w3.org/2000/svg}'
    fr = []
    for g in root.iter(S + 'g'):
        if g.get('class') == 'f':
            r = g.find(S + 'rect')
            t = g.find(S + 'title').text
            fr.append({'d': int(g.get('data-d')), 'x': float(g.get('data-x')), 'v': float(g.get('data-v')),
                       'rx': float(r.get('x')), 'rw': float(r.get('width')), 'title': t, 'name': t.rsplit(' (', 1)[0]})
    d = os.path.dirname(svg)
    fj, sj = os.path.join(d, 'frames.json'), os.path.join(d, 'script.js')
    json.dump({'w': float(root.get('data-w')), 'total': float(root.get('data-total')), 'frames': fr}, open(fj, 'w'))
    text = open(svg).read()
    open(sj, 'w').write(text[text.index('<![CDATA[') + 9:text.index(']]>')])
    here = os.path.dirname(os.path.abspath(__file__))
    r = run(['node', os.path.join(here, 'flame_dom.js'), fj, sj, 'leak_site', '^(calloc|lib)_site$'], check=0)
    res = json.loads(r.stdout)
    expect(res['hovered'].startswith('leak_site ('), 'hover shows the frame: %r' % res['hovered'])
    leak = [f for f in res['after'] if f['name'] == 'leak_site'][0]
    expect(abs(leak['w'] - float(root.get('data-w'))) < 0.01 and leak['shown'], 'zoomed frame is full width: %s' % leak)
    expect(leak['label'] == 'leak_site', 'its label fits now: %r' % leak['label'])
    hidden = [f['name'] for f in res['after'] if not f['shown']]
    expect('calloc_site' in hidden and 'lib_site' in hidden, 'siblings hidden: %s' % hidden)
    expect(sorted(res['highlighted']) == ['calloc_site', 'lib_site'], res['highlighted'])
    total = float(root.get('data-total'))
    want = 100 * (sites['calloc_site'][1] + sites['lib_site'][1]) / total
    expect(res['matched'] == 'Matched: %.2f%%' % want, '%s, want %.2f%%' % (res['matched'], want))
    expect(res['reset'] == 0, 'reset zoom shows every frame again')


# ---- run ---------------------------------------------------------------------

def run_cmd(mode, rc):
    d = os.path.join(OUT, 'run-' + mode)
    shutil.rmtree(d, ignore_errors=True)
    r = run([PM, 'run', '--rate', '1', '--out', d, '--lines', '--', os.path.join(T, 'sites_pie'), mode],
            env={'LD_PRELOAD': ''})
    expect(r.returncode == rc, 'run %s: exit %d, want %d: %s' % (mode, r.returncode, rc, r.stderr))
    lines = {}
    for l in r.stdout.splitlines():
        _, name, ln, live = l.split()
        lines[name] = int(ln)
    return r, d, lines


def test_run_fork():
    r, d, lines = run_cmd('fork', 3)
    files = [f for f in os.listdir(d) if f.startswith('heap.')]
    expect(len(files) == 2, 'one profile per process: %s' % files)
    expect('sites_pie (2 processes)' in r.stderr, r.stderr)
    expect(re.search(r'child_site\s+\S*sites\.c:%d' % lines['child_site'], r.stderr), r.stderr)
    expect(re.search(r'leak_site\s+\S*sites\.c:%d' % lines['leak_site'], r.stderr), r.stderr)


def test_run_exec():
    r, d, lines = run_cmd('exec', 0)
    expect(re.search(r'child_site\s+\S*sites\.c:%d' % lines['child_site'], r.stderr), r.stderr)
    expect('exited with status 0' in r.stderr, r.stderr)


def test_run_peak_leaks_timeline():
    """--peak, --leaks and --timeline, on a library that has issue 27's
    PROFMALLOC_DUMP_PEAK, PROFMALLOC_LEAKS and PROFMALLOC_TIMELINE (each
    part skipped with a message on one that has not)."""
    d = os.path.join(OUT, 'run-peak')
    shutil.rmtree(d, ignore_errors=True)
    r = run([PM, 'run', '--rate', '1', '--out', d, '--peak', '--leaks', '--timeline', '--lines', '--',
             os.path.join(T, 'sites_pie'), 'peak'], env={'LD_PRELOAD': ''}, check=0)
    lines = dict((l.split()[1], int(l.split()[2])) for l in r.stdout.splitlines())
    files = os.listdir(d)
    err = r.stderr
    held = err[:err.index('at the peak')] if 'at the peak' in err else err
    expect(re.search(r'leak_site\s+\S*sites\.c:%d' % lines['leak_site'], held), err)
    expect('peak_site' not in held, 'the freed block is not held at exit: %s' % held)
    if any(f.startswith('peak.') for f in files):
        peak = err[err.index('at the peak'):]
        top = [l for l in peak.splitlines() if 'sites.c' in l][0]
        expect(re.search(r'8\.00 MiB .*peak_site\s+\S*sites\.c:%d' % lines['peak_site'], top), peak)
    else:
        expect('does not support PROFMALLOC_DUMP_PEAK' in err, err)
        print('  (library without PROFMALLOC_DUMP_PEAK: --peak checked for its message only)')
    if any(f.startswith('leaks.') for f in files):
        expect('still allocated at exit (leaks)' in err, err)
    else:
        expect('does not support PROFMALLOC_LEAKS' in err, err)
        print('  (library without PROFMALLOC_LEAKS: --leaks checked for its message only)')
    tls = [f for f in files if f.startswith('timeline.')]
    if tls:
        r = run([PM, 'timeline', os.path.join(d, tls[0])], check=0)
        expect('records' in r.stdout, r.stdout)
    else:
        print('  (library without PROFMALLOC_TIMELINE: --timeline checked for its message only)')


def test_installed_run():
    """make install puts the command in PREFIX/bin and its man page in
    man1; the installed command finds the installed library (../lib)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    dest = os.path.join(OUT, 'inst')
    shutil.rmtree(dest, ignore_errors=True)
    run(['make', '-s', '-C', root, 'BUILD=' + BUILD, 'install', 'DESTDIR=' + dest, 'PREFIX=/opt/pm'], check=0,
        timeout=120)
    pm = os.path.join(dest, 'opt/pm/bin/profmalloc')
    expect(os.access(pm, os.X_OK), 'installed command')
    expect(os.path.exists(os.path.join(dest, 'opt/pm/share/man/man1/profmalloc.1')), 'man page installed')
    d = os.path.join(OUT, 'run-inst')
    shutil.rmtree(d, ignore_errors=True)
    r = run([pm, 'run', '--rate', '1', '--out', d, '--', os.path.join(T, 'sites_pie'), 'child'], env={'LD_PRELOAD': ''})
    expect(r.returncode == 0 and 'child_site' in r.stderr, r.stderr)
    expect(any(f.startswith('heap.') for f in os.listdir(d)), 'a profile written through the installed library')


def test_run_errors():
    r = run([PM, 'run', '--', '/nonexistent/program'], cwd=OUT)
    expect(r.returncode == 127, 'a command that cannot start: %d' % r.returncode)
    left = [f for f in os.listdir(OUT) if f.startswith('profmalloc.program.')]
    expect(not left, 'an empty run directory left behind: %s' % left)
    r = run([PM, 'run'])
    expect(r.returncode == 2 and 'usage' in r.stderr, 'run without a command')
    d = os.path.join(OUT, 'run-fork')
    if os.path.isdir(d):
        r = run([PM, 'run', '--out', d, '--', 'true'])
        expect(r.returncode == 2 and 'already holds' in r.stderr, r.stderr)


# ---- errors, help, colour ----------------------------------------------------

def test_corrupt_and_truncated_inputs():
    """Every prefix class and random corruption of a gzip'd, a raw and a text
    profile gives a message and exit 2, or (for the few that stay valid) 0:
    never a crash, never a hang."""
    d, _ = profile_of('pie')
    src = open(os.path.join(d, 'before.pb.gz'), 'rb').read()
    raw = gzip.decompress(src)
    text = open(os.path.join(d, 'before.heap'), 'rb').read()
    deflated = gzip.compress(raw, 6)
    rnd = random.Random(28)
    cases = []
    for data in (src, raw, text, deflated):
        for cut in sorted(set([1, 2, 9, 10, 17, 18, 40, len(data) // 3, len(data) // 2, len(data) - 9,
                               len(data) - 1] + [rnd.randrange(1, len(data)) for _ in range(8)])):
            cases.append(('cut', data[:cut]))
        for _ in range(12):
            b = bytearray(data)
            for _ in range(rnd.randrange(1, 6)):
                b[rnd.randrange(len(b))] = rnd.randrange(256)
            cases.append(('flip', bytes(b)))
    cases.append(('empty', b''))
    cases.append(('garbage', os.urandom(3000)))
    path = os.path.join(d, 'bad.prof')
    errors = 0
    for kind, data in cases:
        open(path, 'wb').write(data)
        for sub in (['top', path, '-n', '3'], ['stats', path]):
            r = run([PM] + sub, timeout=20)
            expect(r.returncode in (0, 2), '%s: %s exit %d: %s' % (kind, sub[0], r.returncode, r.stderr))
            if r.returncode == 2:
                errors += 1
                expect(r.stderr.startswith('profmalloc: ') and path in r.stderr, 'a message naming the file: %r' % r.stderr)
    expect(errors > len(cases), 'most corrupt inputs are rejected (%d of %d)' % (errors, 2 * len(cases)))
    r = run([PM, 'top', os.path.join(d, 'missing.pb.gz')])
    expect(r.returncode == 2 and 'No such file' in r.stderr, r.stderr)


def test_help_and_usage():
    for sub in ('run', 'top', 'diff', 'flame', 'stats', 'convert', 'timeline', 'demangle'):
        r = run([PM, sub, '--help'], check=0)
        expect(r.stdout.startswith('usage: profmalloc ' + sub), r.stdout)
        expect(all(len(l) <= 80 for l in r.stdout.splitlines()), '%s --help fits 80 columns' % sub)
        r = run([PM, 'help', sub], check=0)
        expect(sub in r.stdout, 'help ' + sub)
        if sub not in ('run', 'demangle'):
            r = run([PM, sub, '--bogus', 'x'])
            expect(r.returncode == 2 and 'unknown option' in r.stderr, '%s --bogus: %d' % (sub, r.returncode))
    r = run([PM, '--help'], check=0)
    expect(all(len(l) <= 80 for l in r.stdout.splitlines()), '--help fits')
    expect(run([PM]).returncode == 2, 'no command')
    expect(run([PM, 'frobnicate']).returncode == 2, 'unknown command')


def in_pty(args, env):
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(env)
        os.execv(args[0], args)
    out = b''
    while True:
        try:
            r, _, _ = select.select([fd], [], [], 10)
            if not r:
                break
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    return out.decode(errors='replace')


def test_colour_only_on_a_terminal():
    d, _ = profile_of('pie')
    args = [PM, 'top', os.path.join(d, 'before.pb.gz'), '-n', '3']
    env = dict(os.environ)
    env.pop('NO_COLOR', None)
    env['TERM'] = 'xterm'
    expect('\033[1m' in in_pty(args, env), 'colour on a terminal')
    env['NO_COLOR'] = '1'
    expect('\033[' not in in_pty(args, env), 'NO_COLOR respected')


def test_demangle_never_wrong():
    """Every C++ name in libstdc++'s symbol table: profmalloc's demangler
    prints what c++filt prints, or leaves the name mangled."""
    if not shutil.which('c++filt') or not shutil.which('nm'):
        print('  (no binutils: skipped)')
        return
    r = run(['sh', '-c', 'g++ -print-file-name=libstdc++.so.6 2>/dev/null || true'])
    lib = r.stdout.strip()
    if not os.path.isabs(lib):
        lib = '/usr/lib/x86_64-linux-gnu/libstdc++.so.6'
    if not os.path.exists(lib):
        print('  (no libstdc++ found: skipped)')
        return
    names = sorted(set(l.split()[-1].split('@')[0] for l in run(['nm', '-D', lib]).stdout.splitlines()
                       if l.split() and l.split()[-1].startswith('_Z')))
    ours = run([PM, 'demangle'], input='\n'.join(names) + '\n', check=0).stdout.splitlines()
    theirs = run(['c++filt'], input='\n'.join(names) + '\n', check=0).stdout.splitlines()
    expect(len(ours) == len(names) == len(theirs), 'one line per name')
    done = wrong = 0
    for n, a, b in zip(names, ours, theirs):
        if a == n:
            continue
        done += 1
        if a != b:
            wrong += 1
            print('  %s: ours %s, c++filt %s' % (n, a, b))
    print('  %d of %d libstdc++ names demangled, %d wrongly' % (done, len(names), wrong))
    expect(wrong == 0, '%d names demangled wrongly' % wrong)
    expect(done > len(names) // 3, 'the common forms are understood (%d of %d)' % (done, len(names)))


# ---- timeline ----------------------------------------------------------------

MB = 1 << 20


def known_timeline():
    """A log in doc/timeline.md's format with a known shape: growth to
    20 MiB at 1.0 s, a fall to 2 MiB, a second peak of 10 MiB at 1.8 s, a
    fall to 1 MiB; its peak sites are sites_pie's leak_site and
    calloc_site.  Ends with an incomplete peak block and a torn line."""
    d, sites = profile_of('pie')
    j = top_json(os.path.join(d, 'before.pb.gz'), '--lines')
    by = {x['function']: x for x in j['sites']}
    exe = by['leak_site']['object']
    base = 0x555555554000
    pc = lambda name: '%x' % (base + int(by[name]['address'], 16) + 1)
    live = [2 * MB * k for k in range(1, 11)] + [10 * MB, 4 * MB, 2 * MB] + [4 * MB, 6 * MB, 8 * MB, 9 * MB, 10 * MB] + [5 * MB, 1 * MB]
    lines = ['profmalloc-timeline 1 pid=4242 start_ns=1795000000000000000 rate=1 interval_ms=100 part=0',
             'M %x-%x 0 %s' % (base, base + 0x10000, exe)]
    prev = 0
    for i, v in enumerate(live):
        t = 100 * (i + 1)
        lines.append('R %d %d %d %d 10 0 %d 0' % (t, v, max(v, prev), min(v, prev), max(v - prev, 0)))
        if t == 1000:
            lines += ['P 1000 %d 2' % v, 'S %d 180 100000 %s,%x' % (18 * MB, pc('leak_site'), base + 0x2000),
                      'S %d 40 50000 %s' % (2 * MB, pc('calloc_site')), 'E 2']
        if t == 1800:
            lines += ['P 1800 %d 1' % v, 'S %d 10 100000 %s' % (10 * MB, pc('calloc_site')), 'E 1']
        prev = v
    lines += ['Z 2000', 'P 2100 3 1', 'S 5 5 1 %s' % pc('leak_site')]
    path = os.path.join(d, 'known.timeline')
    open(path, 'w').write('\n'.join(lines) + '\nR 2200 1')
    return path, live, sites


def test_timeline_summary_and_peaks():
    path, live, sites = known_timeline()
    r = run([PM, 'timeline', path], check=0)
    rows = [l for l in r.stdout.splitlines() if re.match(r'\s+\d+\s+\d', l)]
    expect(len(rows) == 2, 'two complete peaks (the unfinished block dropped): %s' % r.stdout)
    expect(re.search(r'1\s+1\.00 s\s+20\.0 MiB\s+leak_site\s+\S*sites\.c:%d' % sites['leak_site'][0], rows[0]), rows[0])
    expect('calloc_site' in rows[1] and '10.0 MiB' in rows[1], rows[1])
    expect('%d records' % len(live) in r.stdout and 'ended at exit' in r.stdout, r.stdout)
    r = run([PM, 'timeline', path, '--peak', 'max'], check=0)
    expect(re.search(r'18\.0 MiB\s+\S+\s+leak_site', r.stdout), r.stdout)
    r = run([PM, 'timeline', path, '--at', '1.7'], check=0)
    expect('peak 2 of' in r.stdout and 'calloc_site' in r.stdout, r.stdout)
    out = os.path.join(os.path.dirname(path), 'peak1.pb.gz')
    run([PM, 'timeline', path, '--peak', '1', '-o', out], check=0)
    j = top_json(out)
    expect(j['total'] == 20 * MB and j['sites'][0]['function'] == 'leak_site', j)
    expect(run([PM, 'timeline', path, '--peak', '3']).returncode == 2, 'no third peak')


def test_timeline_svg_shape():
    path, live, _ = known_timeline()
    svg = os.path.join(os.path.dirname(path), 'timeline.svg')
    run([PM, 'timeline', path, '-o', svg], check=0)
    root = ET.parse(svg).getroot()
    S = '{http://www.w3.org/2000/svg}'
    line = [e for e in root.iter(S + 'polyline') if e.get('id') == 'live'][0]
    pts = [tuple(map(float, p.split(','))) for p in line.get('points').split()]
    expect(len(pts) == len(live), '%d points for %d records' % (len(pts), len(live)))
    # the drawn shape is the known one: y falls (on screen) as live rises
    for (x0, y0), (x1, y1), a, b in zip(pts, pts[1:], live, live[1:]):
        expect(x1 > x0, 'time goes right')
        expect((y1 < y0) == (b > a) and (y1 == y0) == (b == a), 'shape at %s -> %s' % (a, b))
    peaks = [g for g in root.iter(S + 'g') if g.get('class') == 'peak']
    expect([int(g.get('data-live')) for g in peaks] == [20 * MB, 10 * MB], 'peaks marked')
    hi = min(pts, key=lambda p: p[1])
    c = peaks[0].find(S + 'circle')
    expect(abs(float(c.get('cx')) - hi[0]) < 0.5 and abs(float(c.get('cy')) - hi[1]) < 0.5, 'marker on the top')
    text = ' '.join(t.text or '' for t in root.iter(S + 'text'))
    expect('leak_site' in text and 'sites.c:' in text, 'the highest peak\'s sites listed: %s' % text[-300:])
    screenshot(svg, 'timeline.png')


def test_timeline_corrupt():
    path, _, _ = known_timeline()
    data = open(path, 'rb').read()
    bad = os.path.join(os.path.dirname(path), 'bad.timeline')
    open(bad, 'wb').write(data.replace(b'profmalloc-timeline 1', b'profmalloc-timeline 2', 1))
    r = run([PM, 'timeline', bad])
    expect(r.returncode == 2 and 'version' in r.stderr, r.stderr)
    rnd = random.Random(27)
    for k in range(40):
        b = bytearray(data[:rnd.randrange(1, len(data))])
        for _ in range(rnd.randrange(0, 4)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        open(bad, 'wb').write(bytes(b))
        r = run([PM, 'timeline', bad, '-o', bad + '.svg'], timeout=20)
        expect(r.returncode in (0, 2), 'exit %d: %s' % (r.returncode, r.stderr))


def main():
    os.makedirs(OUT, exist_ok=True)
    names = [a for a in sys.argv[1:] if a.startswith('test_')]
    tests = [(n, f) for n, f in globals().items() if n.startswith('test_') and callable(f)]
    if names:
        tests = [t for t in tests if t[0] in names]
    t0 = time.time()
    for name, fn in tests:
        t = time.time()
        try:
            fn()
            print('[ OK ] %s (%.1f s)' % (name, time.time() - t))
        except Exception as e:  # noqa: a failed test is reported, the rest still run
            failures.append(name)
            print('[FAIL] %s: %s' % (name, e))
    print('test_cli.py: %d tests, %d failed (%.1f s)' % (len(tests), len(failures), time.time() - t0))
    sys.exit(1 if failures else 0)


main()

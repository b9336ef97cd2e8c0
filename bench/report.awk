# bench/report.awk — turns bench/run.sh's results into Markdown tables
# (mode=md) or an SVG bar chart (mode=svg_time, mode=svg_rss).
# Input: TSV lines "rep<TAB>workload<TAB>cell<TAB>status<TAB>result line",
# status ok|FAIL|TIMEOUT; the result line is "key=value ...".
# Variables: mode, workloads (space list), cells (space list), jeprof, quick.
# Portable awk (mawk or gawk): no gawk extensions.

function parse(line, kv,    n, a, i, p) {
    for (i in kv) delete kv[i]
    n = split(line, a, " ")
    for (i = 1; i <= n; i++) {
        p = index(a[i], "=")
        if (p) kv[substr(a[i], 1, p - 1)] = substr(a[i], p + 1)
    }
}

# median of the values of key k in cell (w, c); sets LO and HI; "" if none
function med(w, c, k,    s, n, a, i, j, t) {
    s = val[w SUBSEP c SUBSEP k]
    if (s == "") return ""
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) {
        t = a[i] + 0
        for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
        a[j + 1] = t
    }
    LO = a[1] + 0; HI = a[n] + 0
    if (n % 2) return a[(n + 1) / 2] + 0
    return (a[n / 2] + a[n / 2 + 1]) / 2
}

function num(x) {
    if (x == "") return "–"
    if (x >= 1000) return sprintf("%.0f", x)
    if (x >= 100) return sprintf("%.1f", x)
    if (x >= 10) return sprintf("%.2f", x)
    if (x >= 1) return sprintf("%.3f", x)
    return sprintf("%.4f", x)
}

function status(w, c) {
    if ((w SUBSEP c) in nok) return ""
    if ((w SUBSEP c SUBSEP "FAIL") in st) return "FAIL"
    if ((w SUBSEP c SUBSEP "TIMEOUT") in st) return "TIMEOUT"
    return "–"
}

# "median (lo–hi)" of metric k scaled by f
function cellfmt(w, c, k, f,    m, s) {
    s = status(w, c)
    if (s != "") return s
    m = med(w, c, k)
    if (m == "") return "–"
    if (REPS_MAX > 1) return num(m * f) " (" num(LO * f) "–" num(HI * f) ")"
    return num(m * f)
}

# ratio of medians; "" if either is missing
function ratio(w, c, b, k,    x, y) {
    if (status(w, c) != "" || status(w, b) != "") return ""
    x = med(w, c, k); y = med(w, b, k)
    if (x == "" || y == "" || y <= 0 || x <= 0) return ""
    return x / y
}

function rfmt(r, w, c) {
    if (r == "") { s = status(w, c); return s == "" ? "–" : s }
    return sprintf("%.2f", r)
}

function incell(c,    i) { return (c in iscell) }

function geo_reset() { for (i in gsum) delete gsum[i]; for (i in gn) delete gn[i] }
function geo_add(col, r) { if (r != "" && r > 0) { gsum[col] += log(r); gn[col]++ } }
function geo(col) { return (col in gn) ? sprintf("%.2f", exp(gsum[col] / gn[col])) : "–" }

function base_of(c,    a, sfx) {
    sfx = ""
    if (c ~ /@small$/) { sfx = "@small"; a = substr(c, 1, length(c) - 6) } else a = c
    if (a == "pm" || a == "pm-64k" || a == "pm-1") return "pm-0" sfx
    if (a == "jemalloc-prof") return "jemalloc" sfx
    if (a == "tcmalloc-heapprof") return "tcmalloc" sfx
    if (a == "heaptrack") return "glibc" sfx
    return ""
}
function label_of(c,    a) {
    a = c; sub(/@small$/, "", a)
    if (a == "pm") return "pm (512 KiB) / pm-0"
    if (a == "pm-64k") return "pm-64k / pm-0"
    if (a == "pm-1") return "pm-1 (every alloc) / pm-0"
    if (a == "jemalloc-prof") return "jemalloc prof (lg_prof_sample:19) / jemalloc"
    if (a == "tcmalloc-heapprof") return "gperftools HEAPPROFILE / tcmalloc"
    if (a == "heaptrack") return "heaptrack / glibc"
    return a
}

{
    key = $2 SUBSEP $3
    if ($1 + 0 > REPS_MAX) REPS_MAX = $1 + 0
    if ($4 == "ok") {
        parse($5, kv)
        nok[key]++
        for (k in kv) {
            vk = key SUBSEP k
            val[vk] = (vk in val) ? val[vk] " " kv[k] : kv[k]
        }
    } else st[key SUBSEP $4]++
}

END {
    nw = split(workloads, W, " ")
    ncl = split(cells, C, " ")
    for (i = 1; i <= ncl; i++) iscell[C[i]] = 1
    # main allocators: un-profiled peers and profmalloc at full size
    nm = 0
    split("glibc jemalloc tcmalloc mimalloc pm-0 pm pm-64k pm-1", order, " ")
    for (i = 1; i <= 8; i++) if (incell(order[i])) M[++nm] = order[i]
    npeer = 0
    split("glibc jemalloc tcmalloc mimalloc", po, " ")
    for (i = 1; i <= 4; i++) if (incell(po[i])) PEER[++npeer] = po[i]
    # profiling cells with their baselines
    npr = 0
    split("pm pm-64k pm-1 jemalloc-prof tcmalloc-heapprof heaptrack", pro, " ")
    for (i = 1; i <= 6; i++) {
        c = pro[i]
        if (!incell(c)) c = c "@small"
        if (incell(c) && incell(base_of(c))) { PR[++npr] = c; PB[npr] = base_of(c) }
    }
    if (mode == "md") md()
    else if (mode == "svg_time") svg("seconds", "Time relative to glibc (log scale, lower is better)")
    else if (mode == "svg_rss") svg("peak_rss_kb", "Peak RSS relative to glibc (log scale, lower is better)")
}

function best_peer(w, k,    i, m, b, bm) {
    b = ""; bm = ""
    for (i = 1; i <= npeer; i++) {
        if (status(w, PEER[i]) != "") continue
        m = med(w, PEER[i], k)
        if (m != "" && (bm == "" || m < bm)) { bm = m; b = PEER[i] }
    }
    return b
}

function metric_tables(k, f, unit, title, chart,    i, j, w, hdr, sep, r, b, line) {
    print "## " title
    print ""
    hdr = "| workload |"; sep = "| --- |"
    for (j = 1; j <= nm; j++) { hdr = hdr " " M[j] " |"; sep = sep " ---: |" }
    print "Median " unit " (min–max over repetitions):"
    print ""
    print hdr; print sep
    for (i = 1; i <= nw; i++) {
        w = W[i]; line = "| " w " |"
        for (j = 1; j <= nm; j++) line = line " " cellfmt(w, M[j], k, f) " |"
        print line
    }
    print ""
    if (!incell("glibc")) return
    print "Relative to glibc (ratio of medians), and profmalloc relative to the best peer"
    print "(the lowest median among " npeer " un-profiled peers: glibc, jemalloc, tcmalloc, mimalloc):"
    print ""
    hdr = "| workload |"; sep = "| --- |"
    for (j = 1; j <= nm; j++) if (M[j] != "glibc") { hdr = hdr " " M[j] " |"; sep = sep " ---: |" }
    hdr = hdr " best peer |"; sep = sep " --- |"
    if (incell("pm-0")) { hdr = hdr " pm-0 / best |"; sep = sep " ---: |" }
    if (incell("pm")) { hdr = hdr " pm / best |"; sep = sep " ---: |" }
    print hdr; print sep
    geo_reset()
    for (i = 1; i <= nw; i++) {
        w = W[i]; line = "| " w " |"
        for (j = 1; j <= nm; j++) if (M[j] != "glibc") {
            r = ratio(w, M[j], "glibc", k); geo_add(M[j], r)
            line = line " " rfmt(r, w, M[j]) " |"
        }
        b = best_peer(w, k)
        line = line " " (b == "" ? "–" : b) " |"
        if (incell("pm-0")) { r = (b == "" ? "" : ratio(w, "pm-0", b, k)); geo_add("pm-0/best", r); line = line " " rfmt(r, w, "pm-0") " |" }
        if (incell("pm")) { r = (b == "" ? "" : ratio(w, "pm", b, k)); geo_add("pm/best", r); line = line " " rfmt(r, w, "pm") " |" }
        print line
    }
    line = "| **geometric mean** |"
    for (j = 1; j <= nm; j++) if (M[j] != "glibc") line = line " **" geo(M[j]) "** |"
    line = line " |"
    if (incell("pm-0")) line = line " **" geo("pm-0/best") "** |"
    if (incell("pm")) line = line " **" geo("pm/best") "** |"
    print line
    print ""
    print "![" title " relative to glibc](" chart ")"
    print ""
}

function md(    i, j, w, s, line, hdr, sep, r, m1, m2, f) {
    metric_tables("seconds", 1, "seconds of the timed region", "Time", "img/benchmarks-time.svg")
    metric_tables("peak_rss_kb", 1 / 1024, "peak RSS in MiB (VmHWM)", "Peak RSS", "img/benchmarks-rss.svg")

    # fastpath per size
    if (("fastpath" SUBSEP "glibc" SUBSEP "pair_ns_16") in val || ("fastpath" SUBSEP M[1] SUBSEP "pair_ns_16") in val) {
        print "## fastpath per size"
        print ""
        print "Median ns per malloc+free: back-to-back pair / in batches of 1000."
        print ""
        hdr = "| size |"; sep = "| ---: |"
        for (j = 1; j <= nm; j++) { hdr = hdr " " M[j] " |"; sep = sep " ---: |" }
        print hdr; print sep
        split("16 32 64 128 256 1024 4096 32768", S, " ")
        for (i = 1; i <= 8; i++) {
            line = "| " S[i] " |"
            for (j = 1; j <= nm; j++) {
                s = status("fastpath", M[j])
                if (s != "") { line = line " " s " |"; continue }
                m1 = med("fastpath", M[j], "pair_ns_" S[i]); m2 = med("fastpath", M[j], "batch_ns_" S[i])
                line = line " " num(m1) " / " num(m2) " |"
            }
            print line
        }
        print ""
    }

    # churn scaling
    if (incell_w("churn") && incell_w("churn-mt")) {
        print "## churn scaling"
        print ""
        print "Throughput (Mops/s, median) of churn with 1 thread and churn-mt (each thread an independent"
        print "churn of the same size); scaling = throughput ratio, ideal = number of threads."
        print ""
        print "| allocator | 1 thread | churn-mt | threads | scaling |"
        print "| --- | ---: | ---: | ---: | ---: |"
        for (j = 1; j <= nm; j++) {
            m1 = med("churn", M[j], "mops"); m2 = med("churn-mt", M[j], "mops"); f = med("churn-mt", M[j], "threads")
            print "| " M[j] " | " num(m1) " | " num(m2) " | " (f == "" ? "–" : f) " | " \
                ((m1 != "" && m2 != "" && m1 > 0) ? sprintf("%.2f", m2 / m1) : "–") " |"
        }
        print ""
    }

    # frag phases
    if (incell_w("frag")) {
        print "## frag: RSS per phase (MiB, median)"
        print ""
        print "fill = after 200 MB of small blocks; thin = after freeing 90% at random; final = after 100 MB"
        print "of large blocks on top; empty = after freeing everything; peak = VmHWM."
        print ""
        print "| allocator | fill | thin | final | empty | peak |"
        print "| --- | ---: | ---: | ---: | ---: | ---: |"
        for (j = 1; j <= nm; j++) {
            s = status("frag", M[j])
            if (s != "") { print "| " M[j] " | " s " | | | | |"; continue }
            print "| " M[j] " | " num(med("frag", M[j], "fill_rss_kb") / 1024) " | " num(med("frag", M[j], "thin_rss_kb") / 1024) \
                " | " num(med("frag", M[j], "final_rss_kb") / 1024) " | " num(med("frag", M[j], "empty_rss_kb") / 1024) \
                " | " num(med("frag", M[j], "peak_rss_kb") / 1024) " |"
        }
        print ""
    }

    # price of profiling
    print "## Price of profiling"
    print ""
    print "Each profiler relative to the same allocator without profiling (ratio of medians; 1.00 = free)."
    if (!quick) print "Columns marked (reduced) ran on the reduced sizes listed under Workloads, with their baseline at the same size: exact tracers are too slow for the full sizes."
    if (jeprof != "yes") print "jemalloc profiling: not available in this jemalloc build (MALLOC_CONF=prof:true was rejected)."
    print ""
    if (npr == 0) { print "(no profiling cells were run)"; print ""; return }
    for (pass = 1; pass <= 2; pass++) {
        k = pass == 1 ? "seconds" : "peak_rss_kb"
        print (pass == 1 ? "Time:" : "Peak RSS:")
        print ""
        hdr = "| workload |"; sep = "| --- |"
        for (j = 1; j <= npr; j++) { hdr = hdr " " label_of(PR[j]) (PR[j] ~ /@small$/ ? " (reduced)" : "") " |"; sep = sep " ---: |" }
        print hdr; print sep
        geo_reset()
        for (i = 1; i <= nw; i++) {
            w = W[i]; line = "| " w " |"
            for (j = 1; j <= npr; j++) { r = ratio(w, PR[j], PB[j], k); geo_add(j, r); line = line " " rfmt(r, w, PR[j]) " |" }
            print line
        }
        line = "| **geometric mean** |"
        for (j = 1; j <= npr; j++) line = line " **" geo(j) "** |"
        print line
        print ""
    }
    print "Absolute times of the profiled runs and their baselines (median seconds; @small = reduced size):"
    print ""
    nu = 0
    for (j = 1; j <= npr; j++) {
        if (!(PB[j] in seen)) { seen[PB[j]] = 1; U[++nu] = PB[j] }
        if (!(PR[j] in seen)) { seen[PR[j]] = 1; U[++nu] = PR[j] }
    }
    hdr = "| workload |"; sep = "| --- |"
    for (j = 1; j <= nu; j++) { hdr = hdr " " U[j] " |"; sep = sep " ---: |" }
    print hdr; print sep
    for (i = 1; i <= nw; i++) {
        w = W[i]; line = "| " w " |"
        for (j = 1; j <= nu; j++) line = line " " cellfmt(w, U[j], "seconds", 1) " |"
        print line
    }
    print ""
}

function incell_w(w,    j) {
    for (j = 1; j <= nw; j++) if (W[j] == w) return 1
    return 0
}

function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); return s }

# grouped bars: one group per workload (+ geometric mean), one bar per allocator
function svg(k, title,    j, i, w, nb, B, colors, gw, bw, X0, Y0, H, lo, hi, r, y1, y, x, R, have, e, line, gx, lbl) {
    nb = 0
    for (j = 1; j <= nm; j++) if (M[j] != "glibc") B[++nb] = M[j]
    split("#4e79a7 #f28e2b #59a14f #b07aa1 #e15759 #9c1d1d #ff9d9a #edc948", colors, " ")
    lo = 0; hi = 0
    geo_reset()
    for (i = 1; i <= nw; i++) for (j = 1; j <= nb; j++) {
        r = ratio(W[i], B[j], "glibc", k); R[i, j] = r
        if (r != "") {
            geo_add(j, r); e = log(r) / log(2)
            if (e < lo) lo = e
            if (e > hi) hi = e
        }
    }
    for (j = 1; j <= nb; j++) R[nw + 1, j] = (j in gn) ? exp(gsum[j] / gn[j]) : ""
    lo = int(lo - 0.999); hi = int(hi + 0.999)
    if (lo > -1) lo = -1
    if (hi < 1) hi = 1
    if (lo < -8) lo = -8
    if (hi > 8) hi = 8
    bw = 12; gw = nb * bw + 18; X0 = 64; Y0 = 56; H = 300
    width = X0 + (nw + 1) * gw + 20
    height = Y0 + H + 60
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n", width, height, width, height
    printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
    printf "<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", X0, esc(title)
    # legend
    x = X0
    for (j = 1; j <= nb; j++) {
        printf "<rect x=\"%d\" y=\"28\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"37\">%s</text>\n", x, colors[j], x + 13, esc(B[j])
        x += 13 + 7 * length(B[j]) + 14
    }
    # grid: powers of two
    for (e = lo; e <= hi; e++) {
        y = Y0 + (hi - e) / (hi - lo) * H
        printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%s\"/>\n", X0, y, width - 20, y, e == 0 ? "#333" : "#ddd", e == 0 ? "1.5" : "1"
        lbl = e >= 0 ? sprintf("×%d", 2 ^ e) : sprintf("×1/%d", 2 ^ -e)
        printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", X0 - 6, y + 4, lbl
    }
    y1 = Y0 + hi / (hi - lo) * H
    for (i = 1; i <= nw + 1; i++) {
        w = i <= nw ? W[i] : "geomean"
        gx = X0 + (i - 1) * gw + 9
        for (j = 1; j <= nb; j++) {
            r = R[i, j]; x = gx + (j - 1) * bw
            if (r == "") {
                printf "<text x=\"%d\" y=\"%.1f\" font-size=\"9\" fill=\"#c00\">×</text>\n", x + 2, y1 - 3
                continue
            }
            e = log(r) / log(2)
            if (e < lo) e = lo
            if (e > hi) e = hi
            y = Y0 + (hi - e) / (hi - lo) * H
            printf "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"><title>%s, %s: %.2f</title></rect>\n", x, (y < y1 ? y : y1), bw - 2, (y < y1 ? y1 - y : y - y1) + 0.5, colors[j], esc(w), esc(B[j]), r
        }
        printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\"%s>%s</text>\n", gx + nb * bw / 2, Y0 + H + 18, (i > nw ? " font-weight=\"bold\"" : ""), esc(w)
    }
    printf "<text x=\"%d\" y=\"%d\" fill=\"#555\">Bars go up from ×1 (glibc) when slower/larger, down when faster/smaller; × = no result.</text>\n", X0, Y0 + H + 42
    print "</svg>"
}

/* inflate.c — a DEFLATE decoder (RFC 1951) with the gzip (RFC 1952) and
 * zlib (RFC 1950) containers, for the command's profile readers and for
 * compressed ELF debug sections.  Every read is bounds-checked and the
 * output is capped, so a corrupt or hostile input ends in an error, never
 * a crash or a hang (the fuzz target, test/cli/fuzz_readers.c, pins it).
 * Owns no global state; output buffers come from malloc. */
#include "cli.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#define MAXBITS 15
#define MAXLCODES 286
#define MAXDCODES 30
#define MAXCODES (MAXLCODES + MAXDCODES)
#define FIXLCODES 288

typedef struct {
    const uint8_t *in;
    size_t inlen, incnt;
    uint32_t bitbuf;
    int bitcnt;
    uint8_t *out;
    size_t outlen, outcap, limit;
    const char *err;
    jmp_buf env;
} state_t;

typedef struct {
    short count[MAXBITS + 1];
    short symbol[FIXLCODES];
} huff_t;

static _Noreturn void fail(state_t *s, const char *msg)
{
    s->err = msg;
    longjmp(s->env, 1);
}

static int bits(state_t *s, int need)
{
    uint32_t val = s->bitbuf;
    while (s->bitcnt < need) {
        if (s->incnt >= s->inlen) fail(s, "compressed data is truncated");
        val |= (uint32_t)s->in[s->incnt++] << s->bitcnt;
        s->bitcnt += 8;
    }
    s->bitbuf = val >> need;
    s->bitcnt -= need;
    return (int)(val & ((1UL << need) - 1));
}

static void put(state_t *s, const uint8_t *p, size_t n)
{
    if (!n) return;
    if (n > s->limit - s->outlen) fail(s, "uncompressed data is too large");
    if (s->outlen + n > s->outcap) {
        size_t cap = s->outcap ? s->outcap : 65536;
        while (cap < s->outlen + n) cap *= 2;
        uint8_t *q = realloc(s->out, cap);
        if (!q) fail(s, "out of memory");
        s->out = q;
        s->outcap = cap;
    }
    memcpy(s->out + s->outlen, p, n);
    s->outlen += n;
}

static void stored(state_t *s)
{
    s->bitbuf = 0;
    s->bitcnt = 0;
    if (s->inlen - s->incnt < 4) fail(s, "compressed data is truncated");
    unsigned len = s->in[s->incnt] | s->in[s->incnt + 1] << 8;
    unsigned nlen = s->in[s->incnt + 2] | s->in[s->incnt + 3] << 8;
    s->incnt += 4;
    if (len != (~nlen & 0xffff)) fail(s, "corrupt compressed data (stored block length)");
    if (s->inlen - s->incnt < len) fail(s, "compressed data is truncated");
    put(s, s->in + s->incnt, len);
    s->incnt += len;
}

static int decode(state_t *s, const huff_t *h)
{
    int code = 0, first = 0, index = 0;
    for (int len = 1; len <= MAXBITS; len++) {
        code |= bits(s, 1);
        int count = h->count[len];
        if (code - count < first) return h->symbol[index + (code - first)];
        index += count;
        first += count;
        first <<= 1;
        code <<= 1;
    }
    fail(s, "corrupt compressed data (bad code)");
}

/* 0 complete, > 0 incomplete, < 0 over-subscribed */
static int construct(huff_t *h, const short *length, int n)
{
    short offs[MAXBITS + 1];
    for (int len = 0; len <= MAXBITS; len++) h->count[len] = 0;
    for (int sym = 0; sym < n; sym++) h->count[length[sym]]++;
    if (h->count[0] == n) return 0;
    int left = 1;
    for (int len = 1; len <= MAXBITS; len++) {
        left <<= 1;
        left -= h->count[len];
        if (left < 0) return left;
    }
    offs[1] = 0;
    for (int len = 1; len < MAXBITS; len++) offs[len + 1] = offs[len] + h->count[len];
    for (int sym = 0; sym < n; sym++)
        if (length[sym] != 0) h->symbol[offs[length[sym]]++] = (short)sym;
    return left;
}

static void codes(state_t *s, const huff_t *lencode, const huff_t *distcode)
{
    static const short lbase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                    31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    static const short lext[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                   2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    static const short dbase[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,
                                    33,  49,  65,  97,  129, 193,  257,  385,  513,  769,
                                    1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
    static const short dext[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                   6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
    for (;;) {
        int sym = decode(s, lencode);
        if (sym < 256) {
            uint8_t c = (uint8_t)sym;
            put(s, &c, 1);
        } else if (sym == 256) {
            return;
        } else {
            sym -= 257;
            if (sym >= 29) fail(s, "corrupt compressed data (bad length code)");
            size_t len = (size_t)lbase[sym] + (size_t)bits(s, lext[sym]);
            int d = decode(s, distcode);
            if (d >= 30) fail(s, "corrupt compressed data (bad distance code)");
            size_t dist = (size_t)dbase[d] + (size_t)bits(s, dext[d]);
            if (dist > s->outlen) fail(s, "corrupt compressed data (distance too far back)");
            if (len > s->limit - s->outlen) fail(s, "uncompressed data is too large");
            /* grow, then copy byte by byte: the ranges may overlap */
            while (s->outlen + len > s->outcap) {
                size_t cap = s->outcap ? s->outcap * 2 : 65536;
                uint8_t *q = realloc(s->out, cap);
                if (!q) fail(s, "out of memory");
                s->out = q;
                s->outcap = cap;
            }
            for (size_t i = 0; i < len; i++, s->outlen++) s->out[s->outlen] = s->out[s->outlen - dist];
        }
    }
}

static void fixed(state_t *s)
{
    static huff_t lencode, distcode;
    static int built;
    if (!built) {
        short lengths[FIXLCODES];
        int sym = 0;
        for (; sym < 144; sym++) lengths[sym] = 8;
        for (; sym < 256; sym++) lengths[sym] = 9;
        for (; sym < 280; sym++) lengths[sym] = 7;
        for (; sym < FIXLCODES; sym++) lengths[sym] = 8;
        construct(&lencode, lengths, FIXLCODES);
        for (sym = 0; sym < MAXDCODES; sym++) lengths[sym] = 5;
        construct(&distcode, lengths, MAXDCODES);
        built = 1;
    }
    codes(s, &lencode, &distcode);
}

static void dynamic(state_t *s)
{
    static const short order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    short lengths[MAXCODES];
    huff_t lencode, distcode;
    int nlen = bits(s, 5) + 257, ndist = bits(s, 5) + 1, ncode = bits(s, 4) + 4;
    if (nlen > MAXLCODES || ndist > MAXDCODES) fail(s, "corrupt compressed data (bad counts)");
    int index;
    for (index = 0; index < ncode; index++) lengths[order[index]] = (short)bits(s, 3);
    for (; index < 19; index++) lengths[order[index]] = 0;
    if (construct(&lencode, lengths, 19) != 0) fail(s, "corrupt compressed data (bad code lengths)");
    index = 0;
    while (index < nlen + ndist) {
        int sym = decode(s, &lencode), len = 0;
        if (sym < 16) {
            lengths[index++] = (short)sym;
            continue;
        }
        if (sym == 16) {
            if (index == 0) fail(s, "corrupt compressed data (repeat with no length)");
            len = lengths[index - 1];
            sym = 3 + bits(s, 2);
        } else if (sym == 17) {
            sym = 3 + bits(s, 3);
        } else {
            sym = 11 + bits(s, 7);
        }
        if (index + sym > nlen + ndist) fail(s, "corrupt compressed data (too many lengths)");
        while (sym--) lengths[index++] = (short)len;
    }
    if (lengths[256] == 0) fail(s, "corrupt compressed data (no end-of-block code)");
    int err = construct(&lencode, lengths, nlen);
    if (err && (err < 0 || nlen != lencode.count[0] + lencode.count[1]))
        fail(s, "corrupt compressed data (bad literal/length code)");
    err = construct(&distcode, lengths + nlen, ndist);
    if (err && (err < 0 || ndist != distcode.count[0] + distcode.count[1]))
        fail(s, "corrupt compressed data (bad distance code)");
    codes(s, &lencode, &distcode);
}

int cli_inflate_raw(const uint8_t *in, size_t len, uint8_t **out, size_t *outlen, size_t *used,
                    size_t limit, const char **err)
{
    state_t *s = calloc(1, sizeof *s);
    if (!s) {
        *err = "out of memory";
        return -1;
    }
    s->in = in;
    s->inlen = len;
    s->limit = limit;
    s->out = *out;
    s->outlen = s->outcap = *outlen;
    int rc = 0;
    if (setjmp(s->env) == 0) {
        int last;
        do {
            last = bits(s, 1);
            int type = bits(s, 2);
            if (type == 0) stored(s);
            else if (type == 1) fixed(s);
            else if (type == 2) dynamic(s);
            else fail(s, "corrupt compressed data (block type 3)");
        } while (!last);
    } else {
        rc = -1;
        *err = s->err;
    }
    *out = s->out;
    *outlen = s->outlen;
    if (used) *used = s->incnt;
    free(s);
    return rc;
}

uint32_t cli_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#define OUT_LIMIT ((size_t)1 << 31)

int cli_gunzip(const uint8_t *in, size_t len, uint8_t **out, size_t *outlen, const char **err)
{
    size_t pos = 0;
    *out = NULL;
    *outlen = 0;
    /* one or more members, as gzip(1) concatenates them */
    while (pos < len) {
        const uint8_t *h = in + pos;
        size_t left = len - pos;
        if (left < 18) goto trunc;
        if (h[0] != 0x1f || h[1] != 0x8b) {
            if (pos) break; /* trailing garbage after a member, as gzip -d warns and accepts */
            *err = "not a gzip file";
            goto bad;
        }
        if (h[2] != 8) {
            *err = "gzip: unknown compression method";
            goto bad;
        }
        unsigned flg = h[3];
        size_t p = 10;
        if (flg & 4) {
            if (left < p + 2) goto trunc;
            size_t xlen = h[p] | h[p + 1] << 8;
            p += 2 + xlen;
        }
        if (flg & 8) {
            while (p < left && h[p]) p++;
            p++;
        }
        if (flg & 16) {
            while (p < left && h[p]) p++;
            p++;
        }
        if (flg & 2) p += 2;
        if (p + 8 > left) goto trunc;
        size_t start = *outlen, used = 0;
        if (cli_inflate_raw(h + p, left - p, out, outlen, &used, OUT_LIMIT, err) != 0) goto bad;
        p += used;
        if (p + 8 > left) goto trunc;
        uint32_t crc = (uint32_t)h[p] | (uint32_t)h[p + 1] << 8 | (uint32_t)h[p + 2] << 16 |
                       (uint32_t)h[p + 3] << 24;
        uint32_t isize = (uint32_t)h[p + 4] | (uint32_t)h[p + 5] << 8 | (uint32_t)h[p + 6] << 16 |
                         (uint32_t)h[p + 7] << 24;
        if (crc != cli_crc32(0, *out ? *out + start : (const uint8_t *)"", *outlen - start)) {
            *err = "gzip: CRC mismatch (corrupt file)";
            goto bad;
        }
        if (isize != (uint32_t)(*outlen - start)) {
            *err = "gzip: length mismatch (corrupt file)";
            goto bad;
        }
        pos += p + 8;
    }
    return 0;
trunc:
    *err = "gzip data is truncated";
bad:
    free(*out);
    *out = NULL;
    *outlen = 0;
    return -1;
}

int cli_zlib_inflate(const uint8_t *in, size_t len, uint8_t **out, size_t *outlen, size_t limit,
                     const char **err)
{
    *out = NULL;
    *outlen = 0;
    if (len < 6 || (in[0] & 15) != 8 || ((in[0] << 8) | in[1]) % 31 || (in[1] & 0x20)) {
        *err = "bad zlib header";
        return -1;
    }
    if (cli_inflate_raw(in + 2, len - 2, out, outlen, NULL, limit, err) != 0) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* prof_encode.c — generic building blocks of the profile writers:
 * growable scratch buffers and open-addressing hash tables of item
 * indexes, both in mapped memory; protobuf wire encoding; a gzip container
 * of stored deflate blocks with its CRC32 (no compression: no zlib).
 * Must never: call malloc, stdio or anything that allocates: memory comes
 * from pm_os_map; bytes leave through pm_os_write_all.
 * Lock: none (the caller's state only). */
#include "pm.h"
#include "pm_os.h"
#include "pm_prof_encode.h"

#include <errno.h>
#include <string.h>

/* ---- growable scratch buffers in mmap'd memory ------------------------ */


bool pm_encode_reserve(pm_ebuf_t *b, size_t extra)
{
    if (b->failed) return false;
    if (extra <= b->cap - b->len) return true;
    size_t need = b->len + extra, cap = b->cap ? b->cap : 16384;
    if (need < b->len) goto fail;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) goto fail;
        cap *= 2;
    }
    uint8_t *p = pm_os_map_scratch(cap);
    if (!p) goto fail;
    if (b->len) memcpy(p, b->p, b->len);
    if (b->cap) pm_os_unmap(b->p, b->cap);
    b->p = p;
    b->cap = cap;
    return true;
fail:
    b->failed = true;
    return false;
}

void *pm_encode_add(pm_ebuf_t *b, size_t n)
{
    if (!pm_encode_reserve(b, n)) return NULL;
    if (!b->p) return NULL; /* n == 0 on an empty buffer (fuzz_alloc, UBSan) */
    void *r = b->p + b->len;
    b->len += n;
    return r;
}

void pm_encode_put(pm_ebuf_t *b, const void *d, size_t n)
{
    void *r = pm_encode_add(b, n);
    if (r && n) memcpy(r, d, n);
}

void pm_encode_free(pm_ebuf_t *b)
{
    if (b->cap) pm_os_unmap(b->p, b->cap);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- open-addressing hash tables of item indexes ---------------------- */



bool pm_encode_table_resize(pm_etable_t *t, size_t slots, pm_encode_hash_fn h, const void *ctx)
{
    uint32_t *s = pm_os_map_scratch(slots * sizeof *s);
    if (!s) {
        t->failed = true;
        return false;
    }
    for (size_t i = 0; t->slot && i <= t->mask; i++) {
        uint32_t v = t->slot[i];
        if (!v) continue;
        size_t j = h(ctx, v - 1) & (slots - 1);
        while (s[j]) j = (j + 1) & (slots - 1);
        s[j] = v;
    }
    if (t->slot) pm_os_unmap(t->slot, (t->mask + 1) * sizeof *t->slot);
    t->slot = s;
    t->mask = slots - 1;
    return true;
}

/* The slot holding an item equal to key, or the empty slot where it goes. */
uint32_t *pm_encode_table_slot(pm_etable_t *t, uint64_t h, pm_encode_eq_fn eq, const void *ctx,
                            const void *key)
{
    for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t v = t->slot[i];
        if (!v || eq(ctx, v - 1, key)) return &t->slot[i];
    }
}

/* Call after filling an empty slot returned by pm_encode_table_slot. */
void pm_encode_table_added(pm_etable_t *t, pm_encode_hash_fn h, const void *ctx)
{
    if (++t->count * 2 > t->mask + 1) pm_encode_table_resize(t, (t->mask + 1) * 2, h, ctx);
}

void pm_encode_table_free(pm_etable_t *t)
{
    if (t->slot) pm_os_unmap(t->slot, (t->mask + 1) * sizeof *t->slot);
    t->slot = NULL;
}

/* ---- protobuf encoding ------------------------------------------------ */

void pm_encode_varint(pm_ebuf_t *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        uint8_t c = v & 0x7f;
        v >>= 7;
        tmp[n++] = c | (v ? 0x80 : 0);
    } while (v);
    pm_encode_put(b, tmp, n);
}

void pm_encode_key(pm_ebuf_t *b, unsigned field, unsigned wire)
{
    pm_encode_varint(b, (uint64_t)field << 3 | wire);
}

/* A varint field; zero is the default and is left out. */
void pm_encode_uint(pm_ebuf_t *b, unsigned field, uint64_t v)
{
    if (!v) return;
    pm_encode_key(b, field, 0);
    pm_encode_varint(b, v);
}

void pm_encode_bytes(pm_ebuf_t *b, unsigned field, const void *d, size_t n)
{
    pm_encode_key(b, field, 2);
    pm_encode_varint(b, n);
    pm_encode_put(b, d, n);
}

void pm_encode_msg(pm_ebuf_t *b, unsigned field, const pm_ebuf_t *sub)
{
    pm_encode_bytes(b, field, sub->p, sub->len);
}

/* ValueType {type, unit} */
/* ---- gzip container: stored deflate blocks + CRC32 -------------------- */

static void crc_table(uint32_t t[256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
    }
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int pm_encode_gzip(int fd, const uint8_t *data, size_t len)
{
    static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3 /* unix */};
    uint32_t table[256], crc = 0xffffffffu; /* on the stack: no shared state */
    crc_table(table);
    if (pm_os_write_all(fd, header, sizeof header)) return -1;
    size_t off = 0;
    do {
        size_t n = len - off > 65535 ? 65535 : len - off;
        uint8_t bh[5] = {off + n == len ? 1 : 0, /* BFINAL, BTYPE 00 (stored) */
                         (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)~n, (uint8_t)(~n >> 8)};
        for (size_t i = 0; i < n; i++) crc = table[(crc ^ data[off + i]) & 0xff] ^ (crc >> 8);
        if (pm_os_write_all(fd, bh, sizeof bh) || pm_os_write_all(fd, data + off, n))
            return -1;
        off += n;
    } while (off < len);
    uint8_t trailer[8];
    put_le32(trailer, ~crc);
    put_le32(trailer + 4, (uint32_t)len);
    return pm_os_write_all(fd, trailer, sizeof trailer);
}

/* ---- heapsort ----------------------------------------------------------- */

static void swap_items(uint8_t *a, uint8_t *b, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        uint8_t t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

/* A max-heap of `before`: the root is the item that goes last. */
static void sift(uint8_t *v, size_t root, size_t n, size_t size, pm_encode_before_fn before, const void *ctx)
{
    for (size_t c; (c = 2 * root + 1) < n; root = c) {
        if (c + 1 < n && before(v + c * size, v + (c + 1) * size, ctx)) c++;
        if (!before(v + root * size, v + c * size, ctx)) return;
        swap_items(v + root * size, v + c * size, size);
    }
}

void pm_encode_sort(void *base, size_t n, size_t size, pm_encode_before_fn before, const void *ctx)
{
    uint8_t *v = base;
    for (size_t i = n / 2; i-- > 0;) sift(v, i, n, size, before, ctx);
    for (size_t end = n; end-- > 1;) {
        swap_items(v, v + end * size, size);
        sift(v, 0, end, size, before, ctx);
    }
}

/* pm_prof_encode.h — the profile writers' building blocks (prof_encode.c):
 * growable scratch buffers and open-addressing tables of item indexes in
 * mapped memory, protobuf encoding, and a gzip container of stored deflate
 * blocks.  Never malloc: scratch memory is mapped and unmapped. */
#ifndef PM_PROF_ENCODE_H
#define PM_PROF_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Invariant: len <= cap; cap == 0 iff p == NULL; failed is sticky. */
typedef struct pm_ebuf {
    uint8_t *p;
    size_t len, cap;
    bool failed;
} pm_ebuf_t;
bool pm_encode_reserve(pm_ebuf_t *b, size_t extra); /* room for extra more bytes */
void *pm_encode_add(pm_ebuf_t *b, size_t n);         /* n more bytes, or NULL */
void pm_encode_put(pm_ebuf_t *b, const void *d, size_t n);
void pm_encode_free(pm_ebuf_t *b);

/* slot[i] is an item index + 1, or 0 when empty; count * 2 <= mask + 1. */
typedef struct pm_etable {
    uint32_t *slot;
    size_t mask, count;
    bool failed;
} pm_etable_t;
typedef uint64_t (*pm_encode_hash_fn)(const void *ctx, uint32_t item);
typedef bool (*pm_encode_eq_fn)(const void *ctx, uint32_t item, const void *key);
bool pm_encode_table_resize(pm_etable_t *t, size_t slots, pm_encode_hash_fn h, const void *ctx);
/* The slot holding an item equal to key, or the empty slot where it goes. */
uint32_t *pm_encode_table_slot(pm_etable_t *t, uint64_t h, pm_encode_eq_fn eq, const void *ctx, const void *key);
/* Call after filling an empty slot returned by pm_encode_table_slot. */
void pm_encode_table_added(pm_etable_t *t, pm_encode_hash_fn h, const void *ctx);
void pm_encode_table_free(pm_etable_t *t);

/* protobuf wire format: varints, keys, and the three field kinds used. */
void pm_encode_varint(pm_ebuf_t *b, uint64_t v);
void pm_encode_key(pm_ebuf_t *b, unsigned field, unsigned wire);
void pm_encode_uint(pm_ebuf_t *b, unsigned field, uint64_t v);
void pm_encode_bytes(pm_ebuf_t *b, unsigned field, const void *d, size_t n);
void pm_encode_msg(pm_ebuf_t *b, unsigned field, const pm_ebuf_t *sub);

/* Writes data[0..len) to fd as a gzip file of stored deflate blocks.
 * 0, or -1 with errno. */
int pm_encode_gzip(int fd, const uint8_t *data, size_t len);
/* Heapsort of n items of `size` bytes into the order of before(a, b, ctx)
 * ("a goes first"): no qsort, which may allocate; no recursion. */
typedef bool (*pm_encode_before_fn)(const void *a, const void *b, const void *ctx);
void pm_encode_sort(void *base, size_t n, size_t size, pm_encode_before_fn before, const void *ctx);

#endif

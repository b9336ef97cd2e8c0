/* cache.h — the example service's C side: a string cache. */
#include <stddef.h>

char *copy_value(const char *value, size_t n);
void cache_put(const char *key, const char *value, size_t n);
size_t cache_len(const char *key);

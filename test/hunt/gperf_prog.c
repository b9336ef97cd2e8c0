/* gperf_prog.c — a program written for gperftools' heap profiler and its
 * MallocExtension C API, built with -lprofmalloc (test_gperftools_api).
 * argv[1]: the profile prefix.  Exit status: 0, or the failed check. */
#include <gperftools/heap-profiler.h>
#include <gperftools/malloc_extension_c.h>
#include <stdlib.h>
#include <string.h>

static void *kept[2560];

__attribute__((noinline)) void gperf_site(void)
{
    for (int i = 0; i < 2560; i++) kept[i] = malloc(4000); /* ~10 MB */
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    if (IsHeapProfilerRunning()) return 3;
    HeapProfilerStart(argv[1]);
    if (!IsHeapProfilerRunning()) return 4;
    gperf_site();
    HeapProfilerDump("after gperf_site");
    char *text = GetHeapProfile();
    if (!text || strncmp(text, "heap profile:", 13) != 0) return 5;
    free(text);
    size_t v = 0;
    if (!MallocExtension_GetNumericProperty("generic.current_allocated_bytes", &v) || v < 2560 * 4000) return 6;
    if (!MallocExtension_GetNumericProperty("generic.heap_size", &v) || v < 2560 * 4000) return 7;
    const char *names[] = {"tcmalloc.pageheap_free_bytes", "tcmalloc.pageheap_unmapped_bytes",
                           "tcmalloc.thread_cache_free_bytes", "tcmalloc.central_cache_free_bytes"};
    for (int i = 0; i < 4; i++)
        if (!MallocExtension_GetNumericProperty(names[i], &v)) return 8;
    if (MallocExtension_GetNumericProperty("no.such.property", &v)) return 9;
    if (MallocExtension_GetAllocatedSize(kept[0]) < 4000) return 10;
    MallocExtension_ReleaseFreeMemory();
    HeapProfilerStop();
    if (IsHeapProfilerRunning()) return 11;
    HeapProfilerDump("stopped: no file");
    return 0;
}

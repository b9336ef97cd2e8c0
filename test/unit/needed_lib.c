/* needed_lib.c — a library test_prof_unwind links against (DT_NEEDED), built
 * without .eh_frame_hdr: the unwinder has no table of it, so it never lists
 * it by name.  test_needed_name_plugin_kept opens another file of the same
 * name as a plugin, which must not count as the program's library. */
int st_needed_fn(int x) { return x + 1; }

# test/unit/prof_unwind.mk — unit tests of the stack unwinder, included by
# the top Makefile.  Uses BUILD, CC, PM_CFLAGS and CMOCKA_LIBS.
#   test_prof_unwind      the walks (prof_unwind.c, prof_objects.c,
#                         prof_unwind_cfi.c compiled into the test directly);
#                         the known call chain (stacktrace_chain.c) is built
#                         twice: without and with frame pointers
#   test_prof_unwind_cfi  the CFI decoder alone, on hand-built byte buffers

ST_DIR := $(BUILD)/test/stacktrace
ST_HDRS := src/pm.h src/pm_os.h src/pm_prof_unwind.h src/pm_prof_unwind_cfi.h src/pm_prof_objects.h src/pm_elf.h
ST_CHAIN_FLAGS := -O2 -fno-inline -fno-optimize-sibling-calls $(PM_NOSPLIT)
ST_SRCS := prof_unwind prof_objects prof_unwind_cfi prof_unwind_go os_linux
ST_OBJS := $(ST_SRCS:%=$(ST_DIR)/%.o) $(ST_DIR)/needed.o $(ST_DIR)/chain_om.o $(ST_DIR)/chain_fp.o \
	$(ST_DIR)/test_prof_unwind.o

$(ST_SRCS:%=$(ST_DIR)/%.o): $(ST_DIR)/%.o: src/%.c $(ST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -c $< -o $@

$(ST_DIR)/needed.o: src/needed.c $(ST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -c $< -o $@

$(ST_DIR)/chain_om.o: test/unit/stacktrace_chain.c $(ST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) $(ST_CHAIN_FLAGS) -fomit-frame-pointer -DCHAIN_PREFIX=om -c $< -o $@

$(ST_DIR)/chain_fp.o: test/unit/stacktrace_chain.c $(ST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) $(ST_CHAIN_FLAGS) -fno-omit-frame-pointer -DCHAIN_PREFIX=fp -c $< -o $@

$(ST_DIR)/test_prof_unwind.o: test/unit/test_prof_unwind.c test/unit/stacktrace_chain.c $(ST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -c $< -o $@

$(BUILD)/test/test_prof_unwind: $(ST_OBJS) $(ST_DIR)/plug_a.so $(ST_DIR)/plug_b.so \
		$(ST_DIR)/plug_m1.so $(ST_DIR)/plug_m2.so $(ST_DIR)/plug_many.so \
		$(ST_DIR)/needed/libstneeded.so $(ST_DIR)/other/libstneeded.so
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) $(ST_OBJS) -o $@ -Wl,--no-as-needed -L$(ST_DIR)/needed -lstneeded \
		-Wl,-rpath,'$$ORIGIN/stacktrace/needed' $(CMOCKA_LIBS) -lpthread -ldl

# A library the test links against, without .eh_frame_hdr, and a plugin of
# the same file name elsewhere (plug_many.so's code).
$(ST_DIR)/needed/libstneeded.so: test/unit/needed_lib.c
	@mkdir -p $(@D)
	$(CC) -shared -fPIC -O2 -Wl,--no-eh-frame-hdr -Wl,-soname,libstneeded.so $< -o $@
$(ST_DIR)/other/libstneeded.so: $(ST_DIR)/plug_many.so
	@mkdir -p $(@D)
	cp $< $@

# The reload tests' plugins, two builds of each source: plug_a/plug_b
# differ in one frame size; plug_m1/plug_m2 have an FDE with the same bytes
# at another place.
$(ST_DIR)/plug_a.so $(ST_DIR)/plug_b.so: test/unit/reload_plug.S
$(ST_DIR)/plug_m1.so $(ST_DIR)/plug_m2.so: test/unit/reload_move.S
$(ST_DIR)/plug_a.so: PLUG_DEFS := -DFRAME=8
$(ST_DIR)/plug_b.so: PLUG_DEFS := -DFRAME=120
$(ST_DIR)/plug_m1.so: PLUG_DEFS := -DV=1
$(ST_DIR)/plug_m2.so: PLUG_DEFS := -DV=2
# The unload tests' plugin: a .eh_frame of several pages.
$(ST_DIR)/plug_many.so: test/unit/reload_plug.S
$(ST_DIR)/plug_many.so: PLUG_DEFS := -DFRAME=8 -DMANY_FDES
$(ST_DIR)/plug_%.so:
	@mkdir -p $(@D)
	$(CC) -shared -nostdlib $(PLUG_DEFS) $(filter %.S,$^) -o $@

$(BUILD)/test/test_prof_unwind_cfi: test/unit/test_prof_unwind_cfi.c src/prof_unwind_cfi.c src/pm_prof_unwind_cfi.h src/pm.h
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) test/unit/test_prof_unwind_cfi.c src/prof_unwind_cfi.c -o $@ $(CMOCKA_LIBS)

.PHONY: check-prof-unwind
CHECK_TARGETS += check-prof-unwind
check-prof-unwind: $(BUILD)/test/test_prof_unwind $(BUILD)/test/test_prof_unwind_cfi
	ST_PLUG_DIR=$(ST_DIR) $(BUILD)/test/test_prof_unwind
	$(BUILD)/test/test_prof_unwind_cfi

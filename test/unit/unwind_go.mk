# test/unit/unwind_go.mk — src/prof_unwind_go.c on hand-made frames
# (test_unwind_go.c).  Included by the top Makefile.
UG_DIR := $(BUILD)/test/unwind_go

$(UG_DIR)/test_unwind_go: test/unit/test_unwind_go.c src/prof_unwind_go.c src/pm_stacktrace.h
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) $(CMOCKA_CFLAGS) test/unit/test_unwind_go.c src/prof_unwind_go.c -o $@ $(CMOCKA_LIBS)

.PHONY: check-unwind-go
CHECK_TARGETS += check-unwind-go
check-unwind-go: $(UG_DIR)/test_unwind_go
	$(UG_DIR)/test_unwind_go

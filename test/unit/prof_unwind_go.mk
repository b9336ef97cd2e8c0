# test/unit/prof_unwind_go.mk — src/prof_unwind_go.c on hand-made frames
# (test_prof_unwind_go.c).  Included by the top Makefile.
UG_DIR := $(BUILD)/test/prof_unwind_go

$(UG_DIR)/test_prof_unwind_go: test/unit/test_prof_unwind_go.c src/prof_unwind_go.c src/pm_prof_unwind.h
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) $(CMOCKA_CFLAGS) test/unit/test_prof_unwind_go.c src/prof_unwind_go.c -o $@ $(CMOCKA_LIBS)

.PHONY: check-prof-unwind-go
CHECK_TARGETS += check-prof-unwind-go
check-prof-unwind-go: $(UG_DIR)/test_prof_unwind_go
	$(UG_DIR)/test_prof_unwind_go

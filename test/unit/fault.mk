# test/unit/fault.mk — the allocator on a failing OS (test/unit/test_fault.c):
# os_linux.c's fault injection refuses mmap, madvise and munmap while
# threads allocate at three sample rates.  Uses the core archive, as
# test_core does.

FAULT_TEST := $(BUILD)/test/test_fault

$(FAULT_TEST): test/unit/test_fault.c $(CORE_TEST_HDRS) $(PM_TEST_A)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) $(CMOCKA_CFLAGS) $< -o $@ $(PM_TEST_A) $(CMOCKA_LIBS) -pthread

.PHONY: check-fault
CHECK_TARGETS += check-fault
check-fault: $(FAULT_TEST)
	timeout -k 5 120 $(FAULT_TEST)

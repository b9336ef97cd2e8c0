# test/http/http.mk — the /debug/pprof endpoint (src/prof_http.c) end to
# end: test_http.py against http_target, a program linked with
# -lprofmalloc that serves while it allocates.  Included by the top Makefile.
HTTP_DIR := $(BUILD)/test/http

$(HTTP_DIR)/http_target: test/http/http_target.c include/profmalloc.h $(PM_SO)
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Iinclude -fno-builtin-malloc -pthread $< -o $@ \
		-L$(BUILD) -Wl,--no-as-needed -lprofmalloc -Wl,--as-needed -Wl,-rpath,$(abspath $(BUILD))

.PHONY: check-http
CHECK_TARGETS += check-http
check-http: $(HTTP_DIR)/http_target
	python3 test/http/test_http.py $(HTTP_DIR)/http_target

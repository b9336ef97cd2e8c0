# test/go/go.mk — the Go package (bindings/go/profmalloc) and the example
# service (bindings/go/example) under `go test`, against the library in
# $(BUILD).  Standard library only, no network (GOPROXY=off); skipped with
# a message where go is not installed.  Included by the top Makefile.
GO_ENV := CGO_CFLAGS='-I$(abspath include)' \
	CGO_LDFLAGS='-L$(abspath $(BUILD)) -Wl,-rpath,$(abspath $(BUILD))' \
	GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local

.PHONY: check-go
CHECK_TARGETS += check-go
check-go: $(PM_SO)
	@if ! command -v go >/dev/null 2>&1; then \
		echo "check-go: skipped, go is not installed (apt-get install golang-go)"; exit 0; fi; \
	[ -n "$$(go env GOCACHE 2>/dev/null)" ] || export GOCACHE='$(abspath $(BUILD))/go-cache'; \
	set -e; \
	for d in bindings/go/profmalloc bindings/go/example; do \
		echo "== go test $$d"; \
		(cd $$d && $(GO_ENV) go test -count=1 ./...); \
	done

module profmalloc.dev/bindings/go/profmalloc

go 1.19

module profmalloc.dev/bindings/go/example

go 1.19

require profmalloc.dev/bindings/go/profmalloc v0.0.0

replace profmalloc.dev/bindings/go/profmalloc => ../profmalloc

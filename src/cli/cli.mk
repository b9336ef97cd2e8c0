# src/cli/cli.mk — the profmalloc command (build/profmalloc), included by
# the top Makefile.  An ordinary C11 program on libc alone; its sources
# are src/cli/*.c.
CLI_SRCS := $(wildcard src/cli/*.c)
CLI_OBJS := $(CLI_SRCS:src/cli/%.c=$(OBJ)/cli/%.o)
CLI_BIN := $(BUILD)/profmalloc
CLI_CFLAGS := -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -Isrc/cli \
	-DPM_CLI_VERSION='"$(VERSION)"' -DPM_CLI_LIBDIR='"$(LIBDIR)"'

all: $(CLI_BIN)

$(OBJ)/cli/%.o: src/cli/%.c
	@mkdir -p $(@D)
	$(CC) $(CLI_CFLAGS) -MMD -MP -c $< -o $@

$(CLI_BIN): $(CLI_OBJS)
	$(CC) -o $@ $^

install: install-cli
.PHONY: install-cli
install-cli: $(CLI_BIN)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(MANDIR)/man1
	install -m 755 $(CLI_BIN) $(DESTDIR)$(PREFIX)/bin/profmalloc
	install -m 644 doc/profmalloc.1 $(DESTDIR)$(MANDIR)/man1/profmalloc.1


uninstall: uninstall-cli
.PHONY: uninstall-cli
uninstall-cli:
	rm -f $(DESTDIR)$(PREFIX)/bin/profmalloc $(DESTDIR)$(MANDIR)/man1/profmalloc.1

-include $(wildcard $(OBJ)/cli/*.d)

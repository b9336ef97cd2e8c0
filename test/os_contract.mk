# test/os_contract.mk — check-os-contract: no object of the library but
# os_linux.o (and prof_http.o, below) calls a system-call wrapper (src/pm_os.h's contract), read from
# the objects' undefined symbols, so a call the compiler kept is caught
# whatever the source spells.  Included by the top Makefile.

# libc's wrappers of system calls (and the vDSO clock) that src/ might want;
# a new one in os_linux.c belongs here too.
OS_CONTRACT_SYSCALLS := mmap mmap64 munmap mremap madvise mprotect mincore \
	open open64 openat openat64 close read write pread pwrite readlink readlinkat \
	stat stat64 lstat lstat64 fstat fstat64 fstatat fstatat64 fchmod fcntl fcntl64 \
	rename unlink fsync ftruncate getcwd geteuid getuid getpid gettid syscall \
	clock_gettime gettimeofday time nanosleep sched_yield sigprocmask \
	pthread_sigmask sigpending sigtimedwait getrlimit prlimit prlimit64 getrandom \
	lseek memfd_create eventfd poll socket bind listen accept accept4 connect \
	recv send setsockopt getsockname shutdown

# The one exception, named in src/pm_os.h: prof_http.c, a server on a thread
# of its own and on no allocator path, makes its own socket, poll and memfd
# calls (its whole job); no other file may.
OS_CONTRACT_EXEMPT := $(OBJ)/os_linux.o $(OBJ)/prof_http.o

.PHONY: check-os-contract
CHECK_TARGETS += check-os-contract
check-os-contract: $(filter-out $(OS_CONTRACT_EXEMPT),$(CORE_OBJS) $(OVERRIDE_OBJS)) $(OBJ)/needed.o $(OBJ)/deepbind.o
	@rc=0; for o in $^; do \
		bad=$$(nm -u $$o | awk -v list="$(OS_CONTRACT_SYSCALLS)" \
			'BEGIN { n = split(list, w, " "); for (i = 1; i <= n; i++) bad[w[i]] = 1 } \
			 { sub(/@.*/, "", $$2); if ($$2 in bad) printf "%s ", $$2 }'); \
		[ -z "$$bad" ] || { echo "check-os-contract: $$o calls $$bad(route it through os_linux.c, src/pm_os.h)"; rc=1; }; \
	done; \
	[ $$rc = 0 ] && echo "check-os-contract: only os_linux.o (and prof_http.o's server) make system calls"; exit $$rc

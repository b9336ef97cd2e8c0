/* child_stderr.h — runs a function in a forked child (no core file, default
 * signal handlers, a 10 s alarm) and hands back its wait status and what it
 * wrote on stderr.  Shared by the tests that expect the allocator to abort.
 * Header-only, for test programs that include <cmocka.h> first. */
#ifndef CHILD_STDERR_H
#define CHILD_STDERR_H

#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static inline int run_in_child(void (*fn)(void *), void *arg, char *out, size_t cap)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        /* undo cmocka's handlers: the child must die of the real signal */
        signal(SIGABRT, SIG_DFL);
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        signal(SIGILL, SIG_DFL);
        signal(SIGFPE, SIG_DFL);
        alarm(10);
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        _exit(0); /* not reached when the allocator detects the error */
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while (len < cap - 1 && (n = read(fds[0], out + len, cap - 1 - len)) > 0) len += (size_t)n;
    out[len] = 0;
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

#endif

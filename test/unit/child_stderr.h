/* child_stderr.h — runs a function in a forked child (no core file, default
 * signal handlers, a 10 s alarm) and hands back its wait status and what it
 * wrote on stderr.  Shared by the tests that expect the allocator to abort.
 * Header-only, for test programs that include <cmocka.h> first. */
#ifndef CHILD_STDERR_H
#define CHILD_STDERR_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
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

/* Runs fn(arg) in a child that must die of SIGABRT with stderr holding
 * "profmalloc: <what> 0x<at>", the address the last token of its line.
 * `label` names the case in a failure. */
static inline void expect_child_abort(void (*fn)(void *), void *arg, const char *what,
                                      const void *at, const char *label)
{
    char want[192], out[512];
    snprintf(want, sizeof want, "profmalloc: %s 0x%lx", what, (unsigned long)(uintptr_t)at);
    int status = run_in_child(fn, arg, out, sizeof out);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
        fail_msg("%s: no abort (status 0x%x, stderr \"%s\"), want \"%s\"", label, status, out, want);
    const char *hit = strstr(out, want);
    if (!hit) fail_msg("%s: stderr \"%s\", want \"%s\"", label, out, want);
    const char *end = hit + strlen(want);
    assert_true(*end == '\n' || *end == 0);
}

#endif

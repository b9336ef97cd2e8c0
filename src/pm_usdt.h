/* pm_usdt.h — USDT probes (provider "profmalloc") in the ELF note format
 * of <sys/sdt.h>, written here with the compiler's asm so that no package
 * is needed to build: a probe is one nop at its site plus a .note.stapsdt
 * entry naming it and saying where its arguments are (each as 8 bytes);
 * bpftrace, perf probe, systemtap and gdb find them there.  Nothing runs
 * when no tracer is attached; a tracer turns the nop into a breakpoint.
 * doc/health.md lists the probes (test_usdt_notes pins the list). */
#ifndef PM_USDT_H
#define PM_USDT_H

#include <stdint.h>

#if defined(__x86_64__)

#define PM_USDT_NOP "nop"

/* The note: its descriptor holds the probe's address, the base the
 * tracer relocates by (_.stapsdt.base), the semaphore (none: 0), then the
 * provider, name and argument strings. */
#define PM_USDT_NOTE(name, args)                                                                   \
    "990: " PM_USDT_NOP "\n"                                                                       \
    ".pushsection .note.stapsdt,\"?\",\"note\"\n"                                                  \
    ".balign 4\n"                                                                                  \
    ".4byte 992f-991f, 994f-993f, 3\n"                                                             \
    "991: .asciz \"stapsdt\"\n"                                                                    \
    "992: .balign 4\n"                                                                             \
    "993: .8byte 990b\n"                                                                           \
    ".8byte _.stapsdt.base\n"                                                                      \
    ".8byte 0\n"                                                                                   \
    ".asciz \"profmalloc\"\n"                                                                      \
    ".asciz \"" #name "\"\n"                                                                       \
    ".asciz \"" args "\"\n"                                                                        \
    "994: .balign 4\n"                                                                             \
    ".popsection\n"                                                                                \
    ".ifndef _.stapsdt.base\n"                                                                     \
    ".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n"                        \
    ".weak _.stapsdt.base\n"                                                                       \
    ".hidden _.stapsdt.base\n"                                                                     \
    "_.stapsdt.base: .space 1\n"                                                                   \
    ".size _.stapsdt.base, 1\n"                                                                    \
    ".popsection\n"                                                                                \
    ".endif\n"

/* "nor": the argument may stay where it is (a register, memory, or an
 * immediate), as sys/sdt.h lets it; the tracer reads it from there. */
#define PM_USDT0(name) __asm__ __volatile__(PM_USDT_NOTE(name, ""))
#define PM_USDT1(name, a)                                                                           \
    __asm__ __volatile__(PM_USDT_NOTE(name, "8@%[a1]") ::[a1] "nor"((uint64_t)(a)))
#define PM_USDT2(name, a, b)                                                                        \
    __asm__ __volatile__(PM_USDT_NOTE(name, "8@%[a1] 8@%[a2]") ::[a1] "nor"((uint64_t)(a)),        \
                         [a2] "nor"((uint64_t)(b)))
#define PM_USDT3(name, a, b, c)                                                                     \
    __asm__ __volatile__(PM_USDT_NOTE(name, "8@%[a1] 8@%[a2] 8@%[a3]") ::[a1] "nor"((uint64_t)(a)), \
                         [a2] "nor"((uint64_t)(b)), [a3] "nor"((uint64_t)(c)))

#else /* no probes elsewhere */
#define PM_USDT0(name) ((void)0)
#define PM_USDT1(name, a) ((void)(a))
#define PM_USDT2(name, a, b) ((void)(a), (void)(b))
#define PM_USDT3(name, a, b, c) ((void)(a), (void)(b), (void)(c))
#endif

#endif

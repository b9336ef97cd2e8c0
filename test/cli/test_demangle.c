/* test_demangle.c — the command's Itanium demangler (src/cli/demangle.c)
 * against c++filt's output for the common forms, and the forms it must
 * leave mangled rather than print wrongly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const cases[][2] = {
    {"_Z3foov", "foo()"},
    {"_Z3fooi", "foo(int)"},
    {"_Z3fooPKcRKi", "foo(char const*, int const&)"},
    {"_ZN3foo3barEv", "foo::bar()"},
    {"_ZNK3foo3barEv", "foo::bar() const"},
    {"_ZN3FooC1Ev", "Foo::Foo()"},
    {"_ZN3FooD2Ev", "Foo::~Foo()"},
    {"_ZN2ns3FooC2ERKS0_", "ns::Foo::Foo(ns::Foo const&)"},
    {"_Znwm", "operator new(unsigned long)"},
    {"_Znam", "operator new[](unsigned long)"},
    {"_ZdlPvm", "operator delete(void*, unsigned long)"},
    {"_ZNSt6vectorIiSaIiEE9push_backERKi", "std::vector<int, std::allocator<int> >::push_back(int const&)"},
    {"_ZNSt6vectorIiSaIiEE17_M_realloc_insertIJRKiEEEvN9__gnu_cxx17__normal_iteratorIPiS1_EEDpOT_", NULL},
    {"_Z3maxIiET_S0_S0_", "int max<int>(int, int)"},
    {"_ZN5Cache6insertEPKcm", "Cache::insert(char const*, unsigned long)"},
    {"_ZN12_GLOBAL__N_14workEv", "(anonymous namespace)::work()"},
    {"_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE7reserveEm",
     "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::reserve(unsigned long)"},
    {"_ZN3fooplERKS_", "foo::operator+(foo const&)"},
    {"_ZN3Foo4makeB5cxx11Ev", "Foo::make[abi:cxx11]()"},
    {"_Z4workv.constprop.0", "work() [clone .constprop.0]"},
    {"_Z4workv.isra.0", "work() [clone .isra.0]"},
    {"_ZZ4mainE5cache", "main::cache"},
    {"_ZTV3Foo", "vtable for Foo"},
    {"_Z1fILi3EEvv", "void f<3>()"},
    {"_Z1fSt6vectorIiSaIiEE", "f(std::vector<int, std::allocator<int> >)"},
    {"_Z1fPFviE", NULL},      /* function pointer: left mangled */
    {"_Z1fA10_i", NULL},      /* array: left mangled */
    {"_Z1fIiEvDTcl1gfp_EE", NULL}, /* decltype expression */
    /* Rust's legacy mangling is Itanium's: readable with its hash */
    {"_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write::h0123456789abcdef"},
    {"_RNvCs1234_7mycrate3foo", NULL}, /* Rust v0: shown as it is */
    {"_Z", NULL},
    {"_ZN3foo", NULL},
    {"_Z3foo", "foo"},
    {"_Z999x", NULL},
    {"main", NULL},
    {"_ZNSs4swapERSs", "std::basic_string<char, std::char_traits<char>, std::allocator<char> >::swap("
                       "std::basic_string<char, std::char_traits<char>, std::allocator<char> >&)"},
    {"_ZNSsC1Ev", "std::basic_string<char, std::char_traits<char>, std::allocator<char> >::basic_string()"},
    {"_ZNSt8ios_base4InitC1Ev", "std::ios_base::Init::Init()"},
};

static void test_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = cli_demangle(cases[i][0]);
        if (!cases[i][1]) {
            if (got) fail_msg("%s: want it left mangled, got %s", cases[i][0], got);
        } else {
            if (!got || strcmp(got, cases[i][1])) fail_msg("%s: want %s, got %s", cases[i][0], cases[i][1], got ? got : "(null)");
        }
        free(got);
    }
}

/* Every prefix of every case: no crash, no read past the end. */
static void test_prefixes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i][0]);
        for (size_t k = 0; k <= n; k++) {
            char *s = malloc(k + 1);
            memcpy(s, cases[i][0], k);
            s[k] = 0;
            free(cli_demangle(s));
            free(s);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cases), cmocka_unit_test(test_prefixes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

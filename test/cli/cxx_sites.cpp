// cxx_sites.cpp — C++ allocation sites for test_cxx_names_demangled: a
// method that allocates with new (the site is the method, not operator
// new), a template function, and a constructor.  Prints "site NAME LINE".
#include <cstdio>
#include <string>
#include <vector>

namespace store {
struct Cache {
    std::vector<char *> items;
    __attribute__((noinline)) Cache() { items.reserve(1000); line_ctor = __LINE__; }
    __attribute__((noinline)) void insert(const char *key, unsigned long n)
    {
        char *p = new char[n]; line_insert = __LINE__;
        p[0] = key[0];
        items.push_back(p);
    }
    static int line_ctor, line_insert;
};
int Cache::line_ctor, Cache::line_insert;
} // namespace store

static int line_make;

template <typename T> __attribute__((noinline)) T *make_many(int n)
{
    T *p = new T[n]; line_make = __LINE__;
    return p;
}

int main()
{
    static store::Cache *cache = new store::Cache;
    for (int i = 0; i < 10; i++) cache->insert("k", 100000);
    static long *l = make_many<long>(50000);
    std::printf("site store::Cache::insert(char const*, unsigned long) %d\n", store::Cache::line_insert);
    std::printf("site long* make_many<long>(int) %d\n", line_make);
    std::printf("site store::Cache::Cache() %d\n", store::Cache::line_ctor);
    return l == nullptr;
}

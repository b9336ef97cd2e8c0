// Input compiled with `g++ -O2 -c` while recording gxx-cc1plus.trace.gz
// (see bench/tools/record-trace.sh): the trace is cc1plus's allocations.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

int count_words(const std::vector<std::string> &words)
{
    std::map<std::string, std::vector<int>> m;
    for (size_t i = 0; i < words.size(); i++) m[words[i]].push_back((int)i);
    for (auto &kv : m) std::sort(kv.second.begin(), kv.second.end());
    return (int)m.size();
}

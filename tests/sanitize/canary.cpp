// The sanitizer build's self-check: each mode makes one mistake on purpose, and the test
// expects the sanitizer's report. A build whose flags were lost (or a run whose ASAN_OPTIONS
// silenced it) fails here instead of passing every other test unchecked.
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fsdpp_sanitizer_canary heap-overflow|use-after-free|int-overflow\n");
    return 2;
  }
  // volatile: the compiler may not prove the mistake and drop it.
  volatile int index = 8;
  if (std::strcmp(argv[1], "heap-overflow") == 0) {
    auto data = std::make_unique<int[]>(8);
    return data[index];
  }
  if (std::strcmp(argv[1], "use-after-free") == 0) {
    int* p = new int[8]();
    delete[] p;
    return p[index - 1];
  }
  if (std::strcmp(argv[1], "int-overflow") == 0) {
    volatile int big = std::numeric_limits<int>::max();
    return big + index;
  }
  std::fprintf(stderr, "unknown mode '%s'\n", argv[1]);
  return 2;
}

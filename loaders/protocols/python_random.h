// Python's `random` module, bit for bit, for the parts evaluation protocols need: the MT19937
// generator, `random.seed(int)`, `getrandbits(k)` and `randint` / `randrange` through
// `_randbelow_with_getrandbits` (CPython 3.2 and later; the algorithm has not changed since).
// GPTQ draws its C4 evaluation windows with `random.seed(0)` + `random.randint`, so the same
// documents and offsets come out only when every draw is reproduced exactly.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace qeval {

class PythonRandom {
 public:
  explicit PythonRandom(std::uint64_t seed = 0) { seed_int(seed); }

  // random.seed(n) for a non-negative int n: init_by_array over n's 32-bit words, least
  // significant first (one word 0 for n = 0). Negative seeds use |n| in Python; pass that.
  void seed_int(std::uint64_t n);
  // The same for an arbitrarily large int given as its 32-bit words, least significant first
  // (trailing zero words are dropped, as CPython does).
  void seed_words(std::vector<std::uint32_t> words);

  std::uint32_t next_uint32();  // genrand_uint32
  // random.getrandbits(k), 0 <= k <= 64 (k = 0 gives 0 and consumes nothing).
  std::uint64_t getrandbits(int k);
  // random._randbelow(n) for n >= 1: k = n.bit_length(), draw getrandbits(k) until < n.
  std::uint64_t randbelow(std::uint64_t n);
  // random.randint(a, b) = randrange(a, b + 1); throws (as Python raises ValueError) when b < a.
  std::int64_t randint(std::int64_t a, std::int64_t b);

 private:
  void init_genrand(std::uint32_t s);
  std::array<std::uint32_t, 624> mt_{};
  int index_ = 625;
};

}  // namespace qeval

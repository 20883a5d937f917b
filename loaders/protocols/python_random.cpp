// MT19937 as in CPython's Modules/_randommodule.c (itself Matsumoto and Nishimura's
// mt19937ar.c), with Python's seeding and integer sampling on top.
#include "loaders/protocols/python_random.h"

#include "common/error.h"

namespace qeval {

namespace {
constexpr int N = 624, M = 397;
constexpr std::uint32_t kMatrixA = 0x9908b0dfU, kUpper = 0x80000000U, kLower = 0x7fffffffU;
}  // namespace

void PythonRandom::init_genrand(std::uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < N; ++i)
    mt_[static_cast<std::size_t>(i)] =
        1812433253U * (mt_[static_cast<std::size_t>(i - 1)] ^ (mt_[static_cast<std::size_t>(i - 1)] >> 30)) +
        static_cast<std::uint32_t>(i);
  index_ = N;
}

void PythonRandom::seed_words(std::vector<std::uint32_t> key) {
  while (key.size() > 1 && key.back() == 0) key.pop_back();
  if (key.empty()) key.push_back(0);
  // init_by_array
  init_genrand(19650218U);
  const int length = static_cast<int>(key.size());
  int i = 1, j = 0;
  for (int k = N > length ? N : length; k > 0; --k) {
    auto& a = mt_[static_cast<std::size_t>(i)];
    const std::uint32_t prev = mt_[static_cast<std::size_t>(i - 1)];
    a = (a ^ ((prev ^ (prev >> 30)) * 1664525U)) + key[static_cast<std::size_t>(j)] + static_cast<std::uint32_t>(j);
    ++i, ++j;
    if (i >= N) {
      mt_[0] = mt_[N - 1];
      i = 1;
    }
    if (j >= length) j = 0;
  }
  for (int k = N - 1; k > 0; --k) {
    auto& a = mt_[static_cast<std::size_t>(i)];
    const std::uint32_t prev = mt_[static_cast<std::size_t>(i - 1)];
    a = (a ^ ((prev ^ (prev >> 30)) * 1566083941U)) - static_cast<std::uint32_t>(i);
    ++i;
    if (i >= N) {
      mt_[0] = mt_[N - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;  // MSB 1: the state is never all zero
  index_ = N;
}

void PythonRandom::seed_int(std::uint64_t n) {
  seed_words({static_cast<std::uint32_t>(n & 0xffffffffU), static_cast<std::uint32_t>(n >> 32)});
}

std::uint32_t PythonRandom::next_uint32() {
  if (index_ >= N) {
    auto twist = [&](int k, int next, int far) {
      const std::uint32_t y = (mt_[static_cast<std::size_t>(k)] & kUpper) | (mt_[static_cast<std::size_t>(next)] & kLower);
      mt_[static_cast<std::size_t>(k)] = mt_[static_cast<std::size_t>(far)] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    };
    int k = 0;
    for (; k < N - M; ++k) twist(k, k + 1, k + M);
    for (; k < N - 1; ++k) twist(k, k + 1, k + (M - N));
    twist(N - 1, 0, M - 1);
    index_ = 0;
  }
  std::uint32_t y = mt_[static_cast<std::size_t>(index_++)];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

std::uint64_t PythonRandom::getrandbits(int k) {
  QEVAL_CHECK(k >= 0 && k <= 64, "PythonRandom::getrandbits: k must be in 0..64, found {}", k);
  if (k == 0) return 0;
  if (k <= 32) return next_uint32() >> (32 - k);
  // CPython fills 32-bit words least significant first; the last word keeps its top bits.
  const std::uint64_t low = next_uint32();
  const std::uint64_t high = next_uint32() >> (64 - k);
  return low | (high << 32);
}

std::uint64_t PythonRandom::randbelow(std::uint64_t n) {
  QEVAL_CHECK(n >= 1, "PythonRandom::randbelow: n must be >= 1");
  int k = 0;
  for (std::uint64_t v = n; v != 0; v >>= 1) ++k;  // n.bit_length()
  std::uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::int64_t PythonRandom::randint(std::int64_t a, std::int64_t b) {
  QEVAL_CHECK(b >= a, "randint({}, {}): empty range (Python raises ValueError: empty range for randrange())", a, b);
  const std::uint64_t width = static_cast<std::uint64_t>(b) - static_cast<std::uint64_t>(a) + 1;
  QEVAL_CHECK(width != 0, "randint({}, {}): range wider than 2^64 is not supported", a, b);
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + randbelow(width));
}

}  // namespace qeval

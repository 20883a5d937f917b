// PythonRandom against CPython 3.11's `random` on this machine; every vector below was printed
// by the one-liner above it (python3 -c '...'), not by this project.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/error.h"
#include "loaders/protocols/python_random.h"

namespace qeval {
namespace {

void expect_sequence(const std::vector<std::int64_t>& got, const std::vector<std::int64_t>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "draw " << i;
}

TEST(PythonRandom, Seed0RandintThenGetrandbits) {
  // python3 -c 'import random; random.seed(0); print([random.randint(0, 1024) for _ in range(20)],
  //             [random.getrandbits(32) for _ in range(5)])'
  PythonRandom rng(0);
  std::vector<std::int64_t> ints, bits;
  for (int i = 0; i < 20; ++i) ints.push_back(rng.randint(0, 1024));
  for (int i = 0; i < 5; ++i) bits.push_back(static_cast<std::int64_t>(rng.getrandbits(32)));
  expect_sequence(ints, {788, 861, 82, 530, 995, 829, 621, 976, 733, 447, 285, 577, 286, 194, 513, 300, 635, 202, 151, 676});
  expect_sequence(bits, {2027837527, 2404381470, 432508404, 1519522183, 1864753826});
}

TEST(PythonRandom, Seed42LargeRangesAndWidthOne) {
  // python3 -c 'import random; random.seed(42); print([random.randint(0, 45575) for _ in range(10)],
  //             [random.randint(0, 2**40) for _ in range(3)], [random.randint(7, 7) for _ in range(2)],
  //             random.getrandbits(32))'
  // (45575 = len(valdata) - 1 for C4 validation shard 0; 2**40 needs getrandbits(41), two words.)
  PythonRandom rng(42);
  std::vector<std::int64_t> c4, wide, one;
  for (int i = 0; i < 10; ++i) c4.push_back(rng.randint(0, 45575));
  for (int i = 0; i < 3; ++i) wide.push_back(rng.randint(0, std::int64_t{1} << 40));
  for (int i = 0; i < 2; ++i) one.push_back(rng.randint(7, 7));
  expect_sequence(c4, {41905, 7296, 1639, 18024, 16049, 14628, 9144, 6717, 44348, 35741});
  expect_sequence(wide, {70531617177, 201991441006, 512040151179});
  expect_sequence(one, {7, 7});
  EXPECT_EQ(rng.getrandbits(32), 3075280817u);
}

TEST(PythonRandom, SeedWiderThan32BitsUsesBothWords) {
  // python3 -c 'import random; random.seed(2**40 + 5); print([random.randint(0, 1024) for _ in range(5)],
  //             random.getrandbits(64))'
  PythonRandom rng((std::uint64_t{1} << 40) + 5);
  std::vector<std::int64_t> ints;
  for (int i = 0; i < 5; ++i) ints.push_back(rng.randint(0, 1024));
  expect_sequence(ints, {550, 56, 95, 338, 162});
  EXPECT_EQ(rng.getrandbits(64), 15058832839928215509ull);
}

TEST(PythonRandom, EmptyRangeThrowsLikePython) {
  PythonRandom rng(0);
  EXPECT_THROW(rng.randint(0, -1), Error);  // Python: ValueError: empty range for randrange()
}

}  // namespace
}  // namespace qeval

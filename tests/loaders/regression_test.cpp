// Replays every kept fuzz finding (tests/regression/<harness>/<input>) through the harness that
// found it (fuzz/harnesses.h): each must now be refused with a clean qeval::Error, naming the
// file, instead of crashing, leaking or throwing anything else.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "fuzz/harnesses.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

fs::path regression_dir() { return fs::path(__FILE__).parent_path().parent_path() / "regression"; }

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(FuzzRegression, EveryKeptInputIsRefusedWithQevalError) {
  ASSERT_TRUE(fs::is_directory(regression_dir())) << regression_dir();
  int replayed = 0;
  for (const auto& folder : fs::directory_iterator(regression_dir())) {
    if (!folder.is_directory()) continue;
    const std::string harness = folder.path().filename().string();
    const auto it = fuzz::harnesses().find(harness);
    ASSERT_NE(it, fuzz::harnesses().end()) << "tests/regression/" << harness << " names no harness in fuzz/harnesses.h";
    for (const auto& input : fs::directory_iterator(folder.path())) {
      if (!input.is_regular_file() || input.path().extension() == ".md") continue;
      SCOPED_TRACE(input.path().string());
      const std::string bytes = read_bytes(input.path());
      try {
        it->second(bytes);
        ADD_FAILURE() << harness << "/" << input.path().filename().string() << ": loaded without an error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()), "") << harness;
      } catch (const std::exception& e) {
        ADD_FAILURE() << harness << "/" << input.path().filename().string()
                      << ": threw something other than qeval::Error: " << e.what();
      }
      ++replayed;
    }
  }
  EXPECT_GT(replayed, 0) << "no regression inputs under " << regression_dir();
}

// The split marker that multi-file inputs rely on: parts come back exactly, and the part count
// is capped (the rest stays in the last part).
TEST(FuzzRegression, SplitInputKeepsPartsExactly) {
  const std::string sep(fuzz::kSplit);
  const std::string input = "a" + sep + std::string("\0b", 2) + sep + "c";
  const auto parts = fuzz::split_input(input, 2);  // views into `input`
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0], "a");
  EXPECT_EQ(parts[1], std::string("\0b", 2) + sep + "c");
  EXPECT_EQ(fuzz::split_input("no marker", 4).size(), 1u);
}

}  // namespace
}  // namespace qeval

// qeval eval on a family fixture (Gemma-3: sliding-window layers, sandwich norms) with
// pre-tokenised .bin data and no tokenizer anywhere: the run needs none, the record says so and
// carries the attention windows; text data without a tokenizer is still refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/files.h"
#include "tests/cli/run_qeval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

TEST(CliFamilies, TokenFileNeedsNoTokenizerAndWindowsReachTheRecord) {
  test::TempDir dir;
  std::string tokens;
  for (std::uint16_t i = 0; i < 200; ++i) {
    const std::uint16_t id = static_cast<std::uint16_t>((i * 37 + 11) % 80);
    tokens.append(reinterpret_cast<const char*>(&id), sizeof id);
  }
  test::write_bytes(dir / "val.bin", tokens);
  const std::string model = test::repo_path("tests/model/fixtures/tiny-gemma3-hf").string();
  const auto r = test::run_qeval("eval -q --model " + model + " --data " + (dir / "val.bin").string() +
                                 " --token-dtype uint16 --seq-len 16 --schemes full,int8-moderate --out " +
                                 (dir / "r.json").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto record = nlohmann::json::parse(read_file(dir / "r.json"));
  EXPECT_TRUE(record.at("tokenizer").at("path").is_null());
  EXPECT_EQ(record.at("model").at("format"), "hf-gemma3");
  const auto& attention = record.at("schemes").at(0).at("statistics").at("attention");
  EXPECT_EQ(attention.at("attention_windows"), nlohmann::json({4, 4, 4, 4, 4, 0, 4}));
  EXPECT_TRUE(attention.contains("sliding_window_layers"));

  test::write_bytes(dir / "val.txt", "some text\n");
  const auto text = test::run_qeval("eval -q --model " + model + " --data " + (dir / "val.txt").string() + " --out " +
                                    (dir / "t.json").string());
  EXPECT_EQ(text.status, 2);
  EXPECT_TRUE(test::contains(text.output, "no tokenizer found")) << text.output;
}

}  // namespace
}  // namespace qeval

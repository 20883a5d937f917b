// Integers read from JSON files (common/json_integer.h): only JSON integers that fit convert; a
// float of any size is refused, because nlohmann's get<int64>() would cast it (undefined beyond
// int64's range; found by the tokenizer_json fuzzer).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_integer.h"
#include "loaders/protocols/protocol.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;

TEST(JsonInteger, ConvertsIntegersThatFit) {
  EXPECT_EQ(json_int64(json(-5)), -5);
  EXPECT_EQ(json_int64(json(INT64_MIN)), INT64_MIN);
  EXPECT_EQ(json_int64(json::parse("9223372036854775807")), INT64_MAX);
  EXPECT_EQ(json_uint64(json::parse("18446744073709551615")), UINT64_MAX);
  EXPECT_EQ(json_uint64(json(7)), 7u);
}

TEST(JsonInteger, RefusesFloatsStringsAndIntegersOutOfRange) {
  // 2^63 parses as an unsigned integer: too large for int64, fine for uint64.
  EXPECT_FALSE(json_int64(json::parse("9223372036854775808")).has_value());
  EXPECT_EQ(json_uint64(json::parse("9223372036854775808")), std::uint64_t{1} << 63);
  // Beyond uint64 nlohmann parses a float; so are 3.0 and 1e30.
  for (const char* text : {"88888888888888888800", "3.0", "1e30", "-1e30", "\"3\"", "true", "null"}) {
    EXPECT_FALSE(json_int64(json::parse(text)).has_value()) << text;
    EXPECT_FALSE(json_uint64(json::parse(text)).has_value()) << text;
  }
  EXPECT_FALSE(json_uint64(json(-1)).has_value());
  EXPECT_TRUE(test::throws_with([] { json_integer(json::parse("8.9e121"), "f.json: \"id\""); },
                                {"f.json: \"id\" should be an integer, found 8.9e+121"}));
  EXPECT_TRUE(test::throws_with([] { json_unsigned(json(-2), "f.json: \"seed\""); },
                                {"f.json: \"seed\" should be a non-negative integer, found -2"}));
}

// sample_seed was read with get<uint64_t>() unchecked: a float seed was a cast, now it is an error.
TEST(JsonInteger, ProtocolSampleSeedMustBeANonNegativeInteger) {
  const json base = {{"name", "gptq-c4"}};
  for (const char* seed : {"1e300", "-1", "0.5"}) {
    json j = base;
    j["sample_seed"] = json::parse(seed);
    EXPECT_TRUE(test::throws_with([&] { ProtocolSpec::from_json(j, "p.json"); }, {"p.json", "sample_seed", "non-negative integer"}))
        << seed;
  }
  json ok = base;
  ok["sample_seed"] = 12345;
  EXPECT_EQ(ProtocolSpec::from_json(ok, "p.json").sample_seed, std::uint64_t{12345});
}

}  // namespace
}  // namespace qeval

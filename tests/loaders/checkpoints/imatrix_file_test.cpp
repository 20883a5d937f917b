// llama.cpp's imatrix files (loaders/checkpoints/imatrix_file.h) against files llama.cpp's own code
// wrote: tests/oracle/make_imatrix_fixtures.py made tests/loaders/checkpoints/fixtures/imatrix_*
// with libggml's gguf API (the calls of llama-imatrix's save_imatrix at 0c1e57098), with the gguf
// Python package, and in the legacy layout. qeval reads all three to the same contents, writes
// libggml's and the legacy file byte for byte, computes llama-quantize's importance from them,
// and refuses broken files with errors naming the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/files.h"
#include "loaders/checkpoints/imatrix_file.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return test::repo_path("tests/loaders/checkpoints/fixtures/" + name); }

// The contents the oracle script wrote (its docstring): sums[i] = ((37 i) mod 101 + 1) / 8 · count.
Imatrix fixture_imatrix() {
  Imatrix m;
  const std::vector<std::tuple<std::string, std::int64_t, std::vector<std::int64_t>>> entries = {
      {"blk.0.attn_q.weight", 64, {37}}, {"blk.0.ffn_down_exps.weight", 32, {10, 0, 3, 7}}, {"output.weight", 16, {5}}};
  for (const auto& [name, columns, counts] : entries) {
    ImatrixEntry& e = m.entries[name];
    e.counts = counts;
    for (std::int64_t i = 0; i < columns * static_cast<std::int64_t>(counts.size()); ++i)
      e.sums.push_back(static_cast<float>(((37 * i) % 101 + 1) / 8.0 * static_cast<double>(counts[i / columns])));
  }
  m.datasets = {"wiki.train.raw", "c4-sample.txt"};
  m.chunk_count = 3;
  m.chunk_size = 512;
  m.has_metadata = true;
  return m;
}

::testing::AssertionResult same_contents(const Imatrix& got, const Imatrix& expected) {
  if (got.datasets != expected.datasets) return ::testing::AssertionFailure() << "datasets differ";
  if (got.chunk_count != expected.chunk_count || got.chunk_size != expected.chunk_size)
    return ::testing::AssertionFailure() << "chunks " << got.chunk_count << " x " << got.chunk_size << ", expected "
                                         << expected.chunk_count << " x " << expected.chunk_size;
  if (got.legacy != expected.legacy || got.has_metadata != expected.has_metadata)
    return ::testing::AssertionFailure() << "legacy / has_metadata differ";
  if (got.entries.size() != expected.entries.size())
    return ::testing::AssertionFailure() << got.entries.size() << " entries, expected " << expected.entries.size();
  for (const auto& [name, e] : expected.entries) {
    const auto it = got.entries.find(name);
    if (it == got.entries.end()) return ::testing::AssertionFailure() << "no entry " << name;
    if (it->second.counts != e.counts) return ::testing::AssertionFailure() << name << ": counts differ";
    if (it->second.sums.size() != e.sums.size() ||
        std::memcmp(it->second.sums.data(), e.sums.data(), e.sums.size() * sizeof(float)) != 0)
      return ::testing::AssertionFailure() << name << ": sums differ";
  }
  return ::testing::AssertionSuccess();
}

TEST(ImatrixFile, ReadsWhatLlamaCppsGgufWriterWrote) {
  EXPECT_TRUE(same_contents(read_imatrix(fixture("imatrix_libggml.gguf")), fixture_imatrix()));
}

TEST(ImatrixFile, WritesTheBytesLlamaCppWrites) {
  test::TempDir tmp;
  write_imatrix_gguf(fixture_imatrix(), tmp / "out.gguf");
  const std::string ours = read_file(tmp / "out.gguf"), theirs = read_file(fixture("imatrix_libggml.gguf"));
  ASSERT_EQ(ours.size(), theirs.size());
  EXPECT_TRUE(ours == theirs) << "first difference at byte "
                              << std::mismatch(ours.begin(), ours.end(), theirs.begin()).first - ours.begin();
}

TEST(ImatrixFile, ReadsTheGgufPythonPackagesLayout) {
  EXPECT_TRUE(same_contents(read_imatrix(fixture("imatrix_gguf_py.gguf")), fixture_imatrix()));
}

TEST(ImatrixFile, WritesAndReadsTheLegacyFormat) {
  test::TempDir tmp;
  write_imatrix_legacy(fixture_imatrix(), tmp / "out.dat");
  EXPECT_TRUE(read_file(tmp / "out.dat") == read_file(fixture("imatrix_legacy.dat")));
  const Imatrix m = read_imatrix(fixture("imatrix_legacy.dat"));
  EXPECT_TRUE(m.legacy);
  EXPECT_EQ(m.chunk_count, 3);
  EXPECT_EQ(m.chunk_size, 0);
  EXPECT_EQ(m.datasets, std::vector<std::string>{"c4-sample.txt"});  // the last dataset only
  ASSERT_EQ(m.entries.size(), 3u);
  // ncall = ceil(max count / 512) = 1; values (sum / count) · 1, and 1 where an expert saw nothing.
  const ImatrixEntry& experts = m.entries.at("blk.0.ffn_down_exps.weight");
  EXPECT_EQ(experts.counts, std::vector<std::int64_t>{1});
  const Imatrix written = fixture_imatrix();
  const ImatrixEntry& raw = written.entries.at("blk.0.ffn_down_exps.weight");
  for (std::size_t i = 0; i < raw.sums.size(); ++i) {
    const float count = static_cast<float>(raw.counts[i / 32]);
    EXPECT_EQ(experts.sums[i], count == 0.0f ? 1.0f : raw.sums[i] / count) << i;
  }
}

TEST(ImatrixFile, RoundTripsThroughQevalsWriter) {
  test::TempDir tmp;
  Imatrix m;
  m.entries["a"] = {{1.5f}, {3}};                                            // one column, one matrix
  m.entries["blk.7.ffn_up_exps.weight"] = {std::vector<float>(6 * 5, 0.25f), {0, 1, 2, 3, 4, 5}};
  m.entries["z"] = {{std::numeric_limits<float>::denorm_min(), -0.0f, 1e30f}, {123456789}};
  m.chunk_count = 70000;
  m.chunk_size = 4096;
  m.has_metadata = true;  // no datasets: an empty array, still metadata
  write_imatrix_gguf(m, tmp / "m.gguf");
  Imatrix back = read_imatrix(tmp / "m.gguf");
  m.entries["z"].counts = {123456792};  // counts are stored as float32: 123456789 rounds to ...792
  EXPECT_TRUE(same_contents(back, m));
}

TEST(ImatrixFile, ImportanceIsSumOverCountPerExpertAsLlamaQuantize) {
  const GgmlImportance g = read_ggml_importance(fixture("imatrix_libggml.gguf"));
  const Imatrix raw = fixture_imatrix();
  ASSERT_EQ(g.entries.size(), 3u);
  EXPECT_EQ(g.chunk_count, 3);
  const GgmlImportanceEntry& q = g.entries.at("blk.0.attn_q.weight");
  EXPECT_EQ(q.columns, 64);
  for (std::size_t i = 0; i < 64; ++i) EXPECT_EQ(q.values[i], raw.entries.at("blk.0.attn_q.weight").sums[i] / 37.0f);
  const GgmlImportanceEntry& x = g.entries.at("blk.0.ffn_down_exps.weight");
  EXPECT_EQ(x.columns, 32);
  for (std::size_t i = 32; i < 64; ++i) EXPECT_EQ(x.values[i], 1.0f) << "an expert that saw no token weighs 1";
  EXPECT_EQ(x.values[100], raw.entries.at("blk.0.ffn_down_exps.weight").sums[100] / 7.0f);

  // As quantize_ggml takes it: [experts, columns].
  const at::Tensor t = g.tensor_for("blk.0.ffn_down_exps.weight", 4, 32);
  EXPECT_EQ(t.sizes(), (at::IntArrayRef{4, 32}));
  EXPECT_EQ(t[3][4].item<float>(), x.values[100]);
  EXPECT_FALSE(g.tensor_for("blk.1.attn_q.weight", 1, 64).defined());  // no entry: quantised without
  EXPECT_TRUE(test::throws_with([&] { g.tensor_for("blk.0.attn_q.weight", 1, 128); },
                                {"imatrix_libggml.gguf", "blk.0.attn_q.weight", "64 values", "needs 128"}));

  // The legacy file gives the same weights where every matrix saw tokens (value · ncall / ncall).
  const GgmlImportance l = read_ggml_importance(fixture("imatrix_legacy.dat"));
  EXPECT_EQ(l.entries.at("output.weight").values, g.entries.at("output.weight").values);
  EXPECT_EQ(l.entries.at("blk.0.ffn_down_exps.weight").columns, 128);  // no expert split stored
}

std::string gguf_bytes(const std::function<void(test::GgufBuilder&)>& fill) {
  test::GgufBuilder b;
  fill(b);
  return b.build();
}

void metadata(test::GgufBuilder& b) {
  b.string("general.type", "imatrix");
  b.strings("imatrix.datasets", {"d.txt"});
  b.u32("imatrix.chunk_count", 1);
  b.u32("imatrix.chunk_size", 512);
}

TEST(ImatrixFile, BadFilesGetErrorsNamingTheFileAndWhatIsWrong) {
  test::TempDir tmp;
  auto expect_refused = [&](const std::string& bytes, std::initializer_list<std::string> parts, bool importance) {
    const fs::path p = tmp / "bad.imatrix";
    test::write_bytes(p, bytes);
    std::vector<std::string> all(parts);
    all.push_back("bad.imatrix");
    for (const auto& part : all) {
      try {
        if (importance) {
          read_ggml_importance(p);
        } else {
          read_imatrix(p);
        }
        ADD_FAILURE() << "accepted; expected an error with " << part;
        return;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what() << "\nlacks: " << part;
      }
    }
  };
  const at::Tensor sums = at::ones({2, 8}), counts = at::ones({2, 1});
  expect_refused(gguf_bytes([&](auto& b) { metadata(b); }), {"no tensors"}, false);
  expect_refused(gguf_bytes([&](auto& b) {
                   metadata(b);
                   b.tensor("w.in_sum2", sums, 0);
                 }),
                 {"w.in_sum2 but no w.counts"}, false);
  expect_refused(gguf_bytes([&](auto& b) {
                   metadata(b);
                   b.tensor("w.in_sum2", sums, 1);
                   b.tensor("w.counts", counts, 0);
                 }),
                 {"w.in_sum2", "expected F32"}, false);
  expect_refused(gguf_bytes([&](auto& b) {
                   metadata(b);
                   b.tensor("w.in_sum2", at::ones({15}), 0);
                   b.tensor("w.counts", counts, 0);
                 }),
                 {"15 sums for 2 counts"}, false);
  expect_refused(gguf_bytes([&](auto& b) {
                   metadata(b);
                   b.tensor("w.in_sum2", sums, 0);
                   b.tensor("w.counts", at::full({2, 1}, std::numeric_limits<float>::quiet_NaN()), 0);
                 }),
                 {"count 0 is nan"}, false);
  expect_refused(gguf_bytes([&](auto& b) {
                   b.string("general.type", "imatrix");
                   b.f32("imatrix.chunk_count", 1.0f);
                   b.tensor("w.in_sum2", sums, 0);
                   b.tensor("w.counts", counts, 0);
                 }),
                 {"imatrix.chunk_count", "expected u32"}, false);
  // Readable, but not for quantising: no metadata (llama-quantize refuses it), a non-finite weight.
  expect_refused(gguf_bytes([&](auto& b) {
                   b.tensor("w.in_sum2", sums, 0);
                   b.tensor("w.counts", counts, 0);
                 }),
                 {"missing imatrix metadata"}, true);
  expect_refused(gguf_bytes([&](auto& b) {
                   metadata(b);
                   b.tensor("w.in_sum2", at::full({2, 8}, std::numeric_limits<float>::infinity()), 0);
                   b.tensor("w.counts", counts, 0);
                 }),
                 {"entry w", "not finite"}, true);
  // A broken GGUF is reported as one (the reader's own message), not read as a legacy file.
  expect_refused(std::string("GGUF") + test::GgufBuilder::pod<std::uint32_t>(3) + "\x01\x02", {"truncated GGUF"}, false);
  // Legacy: empty, no entries, a name past the end, too many values.
  expect_refused("", {"truncated imatrix (legacy format)"}, false);
  expect_refused(test::GgufBuilder::pod<std::int32_t>(0), {"0 entries", "legacy format"}, false);
  expect_refused(test::GgufBuilder::pod<std::int32_t>(1) + test::GgufBuilder::pod<std::int32_t>(1000) + "abc",
                 {"a name of 1000 bytes"}, false);
  expect_refused(test::GgufBuilder::pod<std::int32_t>(1) + test::GgufBuilder::pod<std::int32_t>(1) + "w" +
                     test::GgufBuilder::pod<std::int32_t>(1) + test::GgufBuilder::pod<std::int32_t>(1 << 30),
                 {"entry w has 1073741824 values"}, false);
  EXPECT_TRUE(test::throws_with([&] { read_imatrix(tmp / "absent.dat"); }, {"absent.dat", "no such imatrix file"}));
  // Probe wave 7: Σx² is never negative (a negative weight was used as one); a folder is not "no such file".
  expect_refused(gguf_bytes([&](auto& b) {
                   metadata(b);
                   b.tensor("w.in_sum2", at::full({2, 8}, -1.0f), 0);
                   b.tensor("w.counts", counts, 0);
                 }),
                 {"entry w", "importance -1 at index 0 is negative"}, true);
  std::filesystem::create_directories(tmp / "folder.dat");
  EXPECT_TRUE(test::throws_with([&] { read_imatrix(tmp / "folder.dat"); }, {"folder.dat", "not a regular file (a folder)"}));
}

// Every prefix of a legacy file and of a GGUF one is read or refused with qeval::Error: never a
// crash, never another exception (the trailing chunk count and dataset of a legacy file are
// optional, and a GGUF cut in its last tensor's padding still holds every value, so some read).
TEST(ImatrixFile, EveryTruncationIsReadOrRefused) {
  test::TempDir tmp;
  for (const char* name : {"imatrix_legacy.dat", "imatrix_libggml.gguf"}) {
    const std::string whole = read_file(fixture(name));
    int read = 0;
    for (std::size_t n = 0; n < whole.size(); ++n) {
      test::write_bytes(tmp / "cut", whole.substr(0, n));
      try {
        read_imatrix(tmp / "cut");
        ++read;
      } catch (const Error&) {
      }
    }
    EXPECT_GT(read, 0) << name;
    EXPECT_LT(read, 40) << name;
  }
}

TEST(ImatrixFile, WritersRefuseWhatTheFormatCannotHold) {
  test::TempDir tmp;
  Imatrix m = fixture_imatrix();
  m.entries["bad"] = {{1.0f, 2.0f, 3.0f}, {1, 1}};
  EXPECT_TRUE(test::throws_with([&] { write_imatrix_gguf(m, tmp / "x.gguf"); }, {"bad", "3 sums for 2 counts"}));
  Imatrix n = fixture_imatrix();
  n.chunk_size = 0;
  EXPECT_TRUE(test::throws_with([&] { write_imatrix_legacy(n, tmp / "x.dat"); }, {"chunk_size is 0"}));
}

}  // namespace
}  // namespace qeval

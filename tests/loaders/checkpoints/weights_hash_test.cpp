// The weights hash (loaders/checkpoints/weights_hash.h): it equals a reference computed here from
// the files' bytes alone (headers parsed by hand, XXH3 of each tensor's span, lines in name order);
// it is the same whatever reads the evaluation made (nothing, everything, parts out of order, rows,
// two threads), for shards or one file; any tensor byte changed changes it; and the reads of a
// whole evaluation leave nothing to read again.
#include "loaders/checkpoints/weights_hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/files.h"
#include "common/hash.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/gguf.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/checkpoints/safetensors.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

fs::path gpt2_dir() { return test::data_path("fixtures/tiny-gpt2-hf"); }
fs::path llama_dir() { return test::data_path("fixtures/tiny-llama-hf"); }
fs::path stories_bin() { return test::data_path("models/stories260K/stories260K.bin"); }
fs::path stories_gguf() { return test::data_path("models/stories260K/stories260K-tok512-f32.gguf"); }

struct RefTensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

// The definition written out once more, independently of weights_hash.cpp: per tensor XXH3-64 as
// 16 hex digits, then XXH3-64 over "name\0dtype\0d0,d1\0hash\n" in byte order of the names.
std::string reference_hash(const std::map<std::string, RefTensor>& tensors) {
  std::string text;
  for (const auto& [name, t] : tensors) {  // std::map: byte order of the names
    Hasher one;
    one.update(t.bytes);
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    text += name + '\0' + t.dtype + '\0' + shape + '\0' + one.hex() + '\n';
  }
  Hasher all;
  all.update(text);
  return all.hex();
}

// A safetensors file's tensors from its bytes: 8-byte length, JSON header, data area.
void add_safetensors_reference(const fs::path& file, std::map<std::string, RefTensor>& out) {
  const std::string bytes = read_file(file);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const auto begin = entry.at("data_offsets")[0].get<std::uint64_t>(), end = entry.at("data_offsets")[1].get<std::uint64_t>();
    out[name] = {entry.at("dtype").get<std::string>(), entry.at("shape").get<std::vector<std::int64_t>>(),
                 bytes.substr(8 + n + begin, end - begin)};
  }
}

// The weight files as a Hugging Face folder names them: the index's shards, else model.safetensors
// (a fixture folder also holds reference outputs in other safetensors files).
std::map<std::string, RefTensor> safetensors_folder_reference(const fs::path& dir) {
  std::map<std::string, RefTensor> out;
  if (fs::exists(dir / "model.safetensors.index.json")) {
    const nlohmann::json index = nlohmann::json::parse(read_file(dir / "model.safetensors.index.json"));
    std::set<std::string> shards;
    for (const auto& [name, shard] : index.at("weight_map").items()) shards.insert(shard.get<std::string>());
    for (const auto& shard : shards) add_safetensors_reference(dir / shard, out);
  } else {
    add_safetensors_reference(dir / "model.safetensors", out);
  }
  return out;
}

std::string legacy_reference_single(const fs::path& file) { return hash_file(file); }

TEST(WeightsHash, SafetensorsEqualsAReferenceOverTheFilesTensors) {
  for (const fs::path& dir : {gpt2_dir(), llama_dir()}) {
    SCOPED_TRACE(dir.string());
    const std::string expected = reference_hash(safetensors_folder_reference(dir));
    EXPECT_EQ(open_checkpoint(dir)->weights_hash(), expected);  // nothing read before: every byte read for it
    EXPECT_EQ(load_checkpoint(dir).weights_hash, expected);      // from the reads of a whole load
  }
}

TEST(WeightsHash, Llama2cEqualsAReferenceInRunCsLayout) {
  // run.c's order after the 28-byte header; every tensor of the file, freq_cis too, stacked per layer.
  const std::string bytes = read_file(stories_bin());
  std::int32_t h[7];
  std::memcpy(h, bytes.data(), 28);
  const std::int64_t D = h[0], F = h[1], L = h[2], KV = D * h[4] / h[3], V = std::abs(h[5]), S = h[6], hd = D / h[3];
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> layout = {
      {"tok_emb", {V, D}}, {"rms_att", {L, D}}, {"wq", {L, D, D}}, {"wk", {L, KV, D}}, {"wv", {L, KV, D}},
      {"wo", {L, D, D}},   {"rms_ffn", {L, D}}, {"w1", {L, F, D}}, {"w2", {L, D, F}},   {"w3", {L, F, D}},
      {"rms_final", {D}},  {"freq_cis_real", {S, hd / 2}}, {"freq_cis_imag", {S, hd / 2}}};
  if (h[5] < 0) layout.push_back({"wcls", {V, D}});
  std::map<std::string, RefTensor> ref;
  std::size_t at = 28;
  for (const auto& [name, shape] : layout) {
    std::size_t n = 4;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    ref[name] = {"F32", shape, bytes.substr(at, n)};
    at += n;
  }
  ASSERT_EQ(at, bytes.size());
  const std::string expected = reference_hash(ref);
  EXPECT_EQ(load_checkpoint(stories_bin()).weights_hash, expected);
  EXPECT_EQ(open_checkpoint(stories_bin())->weights_hash(), expected);
}

TEST(WeightsHash, GgufEqualsAReferenceOverTheStoredBlocks) {
  const GgufFile file(stories_gguf());
  const std::string bytes = read_file(stories_gguf());
  std::map<std::string, RefTensor> ref;
  for (const auto& t : file.tensors())
    ref[t.name] = {ggml_type_name(t.type), t.shape(), bytes.substr(file.data_offset() + t.offset, t.bytes)};
  const std::string expected = reference_hash(ref);
  EXPECT_EQ(load_checkpoint(stories_gguf()).weights_hash, expected);
  EXPECT_EQ(open_checkpoint(stories_gguf())->weights_hash(), expected);
}

TEST(WeightsHash, TheLegacyDefinitionIsStillTheFilesBytes) {
  EXPECT_EQ(open_checkpoint(stories_bin())->legacy_weights_hash(), legacy_reference_single(stories_bin()));
  EXPECT_EQ(open_checkpoint(gpt2_dir())->legacy_weights_hash(), legacy_reference_single(gpt2_dir() / "model.safetensors"));
  auto reader = open_checkpoint(gpt2_dir());
  EXPECT_EQ(reader->weights_hash_of_kind(kLegacyWeightsHashKind), reader->legacy_weights_hash());
  EXPECT_EQ(reader->weights_hash_of_kind(kWeightsHashKind), reader->weights_hash());
  EXPECT_EQ(reader->weights_hash_of_kind("sha256-of-something"), "");
  EXPECT_NE(reader->weights_hash(), reader->legacy_weights_hash());
  EXPECT_EQ(recorded_weights_hash_kind(nlohmann::json{{"weights_hash", "0123456789abcdef"}}), kLegacyWeightsHashKind);
  EXPECT_EQ(recorded_weights_hash_kind(nlohmann::json{{"weights_hash_kind", kWeightsHashKind}}), kWeightsHashKind);
}

// Reads parts of `path` as a plan might (`how`), then completes the hash.
std::string hash_after(const fs::path& path, const std::string& how) {
  std::unique_ptr<ModelReader> r = open_checkpoint(path);
  const ModelConfig& c = r->config();
  if (how == "blocks backwards, twice") {
    for (int pass = 0; pass < 2; ++pass)
      for (std::int64_t l = c.n_layers - 1; l >= 0; --l) r->block(l);
  } else if (how == "embedding rows, then head in blocks out of order") {
    r->token_embedding_rows(at::tensor(std::vector<std::int64_t>{5, 3, 3, c.vocab_size - 1}, at::kLong));
    const std::int64_t half = c.vocab_size / 2;
    r->lm_head_rows(half, c.vocab_size - half);
    r->lm_head_rows(0, half);
    r->lm_head_rows(1, 2);
    for (std::int64_t l = 0; l < c.n_layers; ++l) r->block(l);
  } else if (how == "everything, then again") {
    r->read_all();
    r->read_all();
  }
  const std::string first = r->weights_hash();
  r->block(0);  // reads after the hash do not move it
  EXPECT_EQ(r->weights_hash(), first);
  return first;
}

TEST(WeightsHash, TheSameWhateverWasReadBeforeAndInWhatOrder) {
  for (const fs::path& path : {gpt2_dir(), llama_dir(), stories_bin(), stories_gguf()}) {
    SCOPED_TRACE(path.string());
    const std::string cold = open_checkpoint(path)->weights_hash();
    for (const char* how : {"blocks backwards, twice", "embedding rows, then head in blocks out of order",
                            "everything, then again"}) {
      SCOPED_TRACE(how);
      EXPECT_EQ(hash_after(path, how), cold);
    }
  }
}

TEST(WeightsHash, ShardsOrOneFileGiveTheSameHash) {
  test::TempDir tmp;
  std::map<std::string, at::Tensor> all;
  for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
    for (auto& [name, t] : read_safetensors(llama_dir() / shard)) all[name] = t;
  write_safetensors(tmp / "model.safetensors", all, {{"written_by", "the test"}});  // other header, other order
  fs::copy_file(llama_dir() / "config.json", tmp / "config.json");
  EXPECT_EQ(load_checkpoint(tmp.path()).weights_hash, load_checkpoint(llama_dir()).weights_hash);
  // The files differ, so the old definition told them apart.
  EXPECT_NE(open_checkpoint(tmp.path())->legacy_weights_hash(), open_checkpoint(llama_dir())->legacy_weights_hash());
}

TEST(WeightsHash, AnyTensorByteChangedChangesIt) {
  const std::string original = read_file(gpt2_dir() / "model.safetensors");
  const std::string config = read_file(gpt2_dir() / "config.json");
  const std::string before = open_checkpoint(gpt2_dir())->weights_hash();
  std::uint64_t n = 0;
  std::memcpy(&n, original.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(original.substr(8, n));
  int tried = 0;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const auto begin = entry.at("data_offsets")[0].get<std::uint64_t>(), end = entry.at("data_offsets")[1].get<std::uint64_t>();
    // The first and the last byte of every tensor, and one in the middle, each alone.
    for (std::uint64_t at : {begin, (begin + end) / 2, end - 1}) {
      test::TempDir tmp;
      std::string bytes = original;
      bytes[8 + n + at] = static_cast<char>(bytes[8 + n + at] ^ 0x01);
      test::write_bytes(tmp / "model.safetensors", bytes);
      test::write_bytes(tmp / "config.json", config);
      EXPECT_NE(open_checkpoint(tmp.path())->weights_hash(), before) << name << " byte " << at - begin;
      EXPECT_NE(load_checkpoint(tmp.path()).weights_hash, before) << name << " byte " << at - begin;
      ++tried;
    }
  }
  EXPECT_GT(tried, 30);
}

TEST(WeightsHash, ReadsInOrderLeaveNothingToReadAgain) {
  test::TempDir tmp;
  std::string bytes(1000, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + 1);
  test::write_bytes(tmp / "w.bin", bytes);
  auto make = [&] {
    auto h = std::make_unique<TensorHashes>();
    h->add("a", "U8", {600}, tmp / "w.bin", 100, 600);
    h->add("b", "U8", {0}, tmp / "w.bin", 700, 0);
    return h;
  };
  std::uint64_t read = 1;
  const std::string cold = make()->finish(&read);
  EXPECT_EQ(read, 600u);
  {
    auto h = make();  // in order, overlapping, with a repeat: nothing left
    h->saw("a", 0, bytes.data() + 100, 250);
    h->saw("a", 100, bytes.data() + 200, 300);
    h->saw("a", 0, bytes.data() + 100, 10);
    h->saw("a", 400, bytes.data() + 500, 200);
    EXPECT_EQ(h->finish(&read), cold);
    EXPECT_EQ(read, 0u);
  }
  {
    auto h = make();  // a span that skips ahead is left to finish()
    h->saw("a", 0, bytes.data() + 100, 100);
    h->saw("a", 300, bytes.data() + 400, 300);
    EXPECT_EQ(h->finish(&read), cold);
    EXPECT_EQ(read, 500u);
  }
  {
    auto h = make();  // two threads handing over spans of one tensor and another's: one value
    h->add("c", "U8", {100}, tmp / "w.bin", 0, 100);
    std::thread other([&] {
      for (std::uint64_t at = 0; at < 600; at += 50) h->saw("a", at, bytes.data() + 100 + at, 50);
    });
    for (std::uint64_t at = 0; at < 100; at += 10) h->saw("c", at, bytes.data() + at, 10);
    other.join();
    auto ref = make();
    ref->add("c", "U8", {100}, tmp / "w.bin", 0, 100);
    EXPECT_EQ(h->finish(&read), ref->finish());
    EXPECT_EQ(read, 0u);
    EXPECT_EQ(h->tensor_hashes().size(), 3u);
  }
}

}  // namespace
}  // namespace qeval

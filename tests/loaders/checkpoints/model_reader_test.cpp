// ModelReader (loaders/checkpoints/model_reader.h): every format read part by part gives the
// values of a whole load, bit for bit (blocks, embedding rows in any order with repeats, the LM
// head by rows), and opening reads the headers only: sizes are known, and a checkpoint whose layout
// is wrong is refused on open, before any weight is read.
#include "loaders/checkpoints/model_reader.h"

#include <gtest/gtest.h>

#include <set>

#include "loaders/checkpoints/qeval_checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/weights.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

void expect_parts_equal_whole_load(const std::filesystem::path& path) {
  SCOPED_TRACE(path.string());
  std::unique_ptr<ModelReader> reader = open_checkpoint(path);
  const LoadedCheckpoint whole = load_checkpoint(path);
  const ModelConfig& c = reader->config();
  EXPECT_EQ(config_to_json(c), config_to_json(whole.config));
  EXPECT_TRUE(reader->info().weights_hash.empty()) << "the hash is computed on first use, not at open";
  EXPECT_EQ(reader->weights_hash(), whole.weights_hash);
  EXPECT_EQ(reader->info().weights_hash, whole.weights_hash);  // and kept
  EXPECT_EQ(reader->info().format, whole.format);
  // Embedding rows in any order, with repeats, at both ends of the vocabulary.
  const at::Tensor ids = at::tensor(std::vector<std::int64_t>{c.vocab_size - 1, 0, 7, 7, 3, c.vocab_size / 2}, at::kLong);
  EXPECT_TRUE(test::tensors_equal(reader->token_embedding_rows(ids), whole.weights.token_embedding.index_select(0, ids)));
  // The head by rows (a block that ends at the last row too).
  const std::int64_t n = std::min<std::int64_t>(5, c.vocab_size);
  EXPECT_TRUE(test::tensors_equal(reader->lm_head_rows(c.vocab_size - n, n), whole.weights.lm_head.narrow(0, c.vocab_size - n, n)));
  EXPECT_TRUE(test::tensors_equal(reader->lm_head_rows(0, n), whole.weights.lm_head.narrow(0, 0, n)));
  for (std::int64_t layer : {std::int64_t{0}, c.n_layers - 1}) {
    const auto got = named_tensors(reader->block(layer), layer);
    const auto expected = named_tensors(whole.weights.blocks[static_cast<std::size_t>(layer)], layer);
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, expected[i].first);
      EXPECT_TRUE(test::tensors_equal(got[i].second, expected[i].second)) << got[i].first;
    }
  }
  if (whole.weights.position_embedding.defined())
    EXPECT_TRUE(test::tensors_equal(reader->position_embedding(), whole.weights.position_embedding));
  // The tensor table (what inspect lists) names every stored tensor once, and the bytes on disk are
  // the weight files' sizes: at least the table's stored bytes, at most them plus the headers.
  ASSERT_FALSE(reader->tensors().empty());
  std::set<std::string> names;
  for (const auto& t : reader->tensors()) {
    EXPECT_TRUE(names.insert(t.file + "/" + t.name).second) << "listed twice: " << t.name;
    EXPECT_FALSE(t.dtype.empty()) << t.name;
    EXPECT_FALSE(t.file.empty()) << t.name;
  }
  EXPECT_GE(reader->bytes_on_disk(), static_cast<std::uint64_t>(reader->part_sizes().stored));
  // The part sizes come from the headers and match the weights.
  const PartSizes& sizes = reader->part_sizes();
  ASSERT_EQ(static_cast<std::int64_t>(sizes.blocks.size()), c.n_layers);
  EXPECT_EQ(sizes.token_embedding, whole.weights.token_embedding.numel() * 4);
  EXPECT_EQ(sizes.lm_head, c.tied_embeddings ? 0 : whole.weights.lm_head.numel() * 4);
  std::int64_t block0 = 0;
  for (const auto& [name, t] : named_tensors(whole.weights.blocks[0], 0)) block0 += t.numel() * 4;
  EXPECT_EQ(sizes.blocks[0], block0);
  EXPECT_GT(sizes.stored, 0);
}

TEST(ModelReader, EveryFormatReadByPartsEqualsTheWholeLoad) {
  expect_parts_equal_whole_load(test::data_path("models/stories260K/stories260K.bin"));        // llama2.c
  expect_parts_equal_whole_load(test::data_path("models/stories260K/stories260K-tok512-f32.gguf"));  // GGUF
  expect_parts_equal_whole_load(test::data_path("fixtures/tiny-gpt2-hf"));   // Conv1D transposed, tied, learned positions
  expect_parts_equal_whole_load(test::data_path("fixtures/tiny-llama-hf"));
  for (const char* family : {"tiny-qwen3-hf", "tiny-gemma3-hf", "tiny-phi3-hf", "tiny-gpt-neox-hf", "tiny-opt-hf"})
    expect_parts_equal_whole_load(test::repo_path(std::string("tests/model/fixtures/") + family));
  const Transformer model = test::random_transformer(21, true, 80, 32, 2);
  test::TempDir dir;
  save_qeval_checkpoint(dir.path(), model.config(), model.weights());
  expect_parts_equal_whole_load(dir.path());  // qeval's own
}

// The read-ahead's file ranges (block_file_spans, common/page_cache.h): for a safetensors folder,
// exactly the stored bytes of the tensors block(layer) reads, within their files, found from the
// headers without leaving the reader in header-only mode; read_into_page_cache reads them all,
// skips a file it cannot open, and stops when told.
TEST(ModelReader, BlockFileSpansAreTheBytesTheBlockReads) {
  for (const char* fixture : {"fixtures/tiny-llama-hf", "fixtures/tiny-gpt2-hf"}) {
    SCOPED_TRACE(fixture);
    std::unique_ptr<ModelReader> reader = open_checkpoint(test::data_path(fixture));
    const LoadedCheckpoint whole = load_checkpoint(test::data_path(fixture));
    const std::int64_t last = reader->config().n_layers - 1;
    const std::vector<FileSpan> first = reader->block_file_spans(0), later = reader->block_file_spans(last);
    ASSERT_FALSE(first.empty());
    std::uint64_t bytes = 0;
    for (const FileSpan& span : first) {
      EXPECT_LE(span.offset + span.bytes, std::filesystem::file_size(span.path)) << span.path;
      bytes += span.bytes;
      for (const FileSpan& other : later)  // another layer's tensors are elsewhere
        EXPECT_TRUE(span.path != other.path || span.offset + span.bytes <= other.offset ||
                    other.offset + other.bytes <= span.offset);
    }
    // As many bytes as the block's tensors hold as stored (float32 fixtures: 4 bytes a value).
    std::uint64_t values = 0;
    for (const auto& [name, t] : named_tensors(whole.weights.blocks[0], 0)) values += static_cast<std::uint64_t>(t.numel());
    const bool fused_or_transposed = std::string(fixture).find("gpt2") != std::string::npos;  // c_attn splits into q, k, v
    if (!fused_or_transposed) EXPECT_EQ(bytes, values * 4);
    EXPECT_EQ(read_into_page_cache(first), bytes);
    // Still reading data after asking for the spans.
    const auto got = named_tensors(reader->block(0), 0);
    const auto expected = named_tensors(whole.weights.blocks[0], 0);
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(test::tensors_equal(got[i].second, expected[i].second));
  }
  std::vector<FileSpan> missing = {{"/nonexistent/qeval-read-ahead", 0, 100}};
  EXPECT_EQ(read_into_page_cache(missing), 0u);
  std::unique_ptr<ModelReader> reader = open_checkpoint(test::data_path("fixtures/tiny-llama-hf"));
  const std::atomic<bool> stopped{true};
  EXPECT_EQ(read_into_page_cache(reader->block_file_spans(0), &stopped), 0u);
  // Readers that do not know their files' ranges give none.
  const Transformer model = test::random_transformer(23, false, 80, 32, 2);
  test::TempDir dir;
  save_qeval_checkpoint(dir.path(), model.config(), model.weights());
  EXPECT_TRUE(open_checkpoint(dir.path())->block_file_spans(0).empty());
}

TEST(ModelReader, OpeningChecksTheLayoutBeforeReadingAnyWeight) {
  const Transformer model = test::random_transformer(22, false, 80, 32, 2);
  test::TempDir dir;
  save_qeval_checkpoint(dir.path(), model.config(), model.weights());
  auto tensors = read_safetensors(dir / "model.safetensors");
  tensors["layers.1.mlp.down.weight"] = tensors["layers.1.mlp.down.weight"].narrow(1, 0, 10).contiguous();
  write_safetensors(dir / "model.safetensors", tensors);
  EXPECT_TRUE(test::throws_with([&] { open_checkpoint(dir.path()); }, {"layers.1.mlp.down.weight", "has shape [32, 10]"}));
  tensors.erase("layers.1.mlp.down.weight");
  write_safetensors(dir / "model.safetensors", tensors);
  EXPECT_TRUE(test::throws_with([&] { open_checkpoint(dir.path()); }, {"missing tensor layers.1.mlp.down.weight"}));
}

}  // namespace
}  // namespace qeval

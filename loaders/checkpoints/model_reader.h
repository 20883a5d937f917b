// ModelReader: a checkpoint's full-precision weights, read part by part when an evaluation plan
// reaches them (DESIGN.md §11): the embedding by rows, one block at a time, the LM head by rows
// (vocabulary blocks). Safetensors, GGUF and llama2.c files are read by offset, so only the part
// asked for is in memory (as float32, with its stored bytes while it converts); nothing is
// memory-mapped, so the file's pages stay in the page cache and out of the process's RSS.
//
// Opening reads and validates the headers only: every tensor the config implies is present with
// its shape and a floating-point type, and none is left over (the same checks and messages as a
// whole load), and each part's size is known before any weight is read (part_sizes()), which
// is what the memory planner (eval/memory_plan.h) needs. A tensor's values are read only when
// its part is.
//
// Reading a part twice gives the same values, and the values of a part are those load_checkpoint
// gives for it (tests/loaders hold every format to that), so a plan that reads a layer once per
// chunk of windows computes exactly what a plan that holds the whole model computes.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/page_cache.h"
#include "loaders/checkpoints/checkpoint.h"
#include "model/config.h"
#include "model/weights.h"

namespace qeval {

class TensorHashes;

// One tensor as the checkpoint's files list it (`qeval inspect` shows the table).
struct TensorHeader {
  std::string name;
  std::string dtype;  // as the file names it: "F16", "BF16", "Q4_K", "F32"
  std::vector<std::int64_t> shape;
  std::string file;  // the file it is in (shards), its name only
  std::int64_t bytes = -1;  // as stored (safetensors, GGUF); -1 where the format does not say
};

// Bytes of each part once read as float32 (and as stored in the file, for reading time).
struct PartSizes {
  std::int64_t token_embedding = 0;      // [V, D]
  std::int64_t position_embedding = 0;   // learned positions only
  std::vector<std::int64_t> blocks;      // per layer
  std::int64_t final_norm = 0;
  std::int64_t lm_head = 0;              // 0 when tied to the token embedding (the same rows are read)
  std::int64_t stored = 0;               // the weight files' tensor bytes, as stored
  std::int64_t largest_block() const;
  std::int64_t total() const;            // every part once (a tied head counted once)
};

class ModelReader {
 public:
  virtual ~ModelReader() = default;

  const ModelConfig& config() const { return info_.config; }
  // Everything load_checkpoint returns but the weights: format, path, notes (and the weights hash
  // once weights_hash() has been asked for).
  const LoadedCheckpoint& info() const { return info_; }
  // The weights hash (LoadedCheckpoint::weights_hash; its definition, weights_hash_kind(), in
  // loaders/checkpoints/weights_hash.h), completed on first use from what the reads so far have
  // hashed: only bytes no read has reached are read for it (after a whole evaluation, the
  // embedding rows it never used; right after open, every tensor). Parts read later are not
  // hashed again.
  const std::string& weights_hash();
  // The definition weights_hash() follows: kWeightsHashKind.
  static const char* weights_hash_kind();
  // The weights hash as qeval computed it before (kLegacyWeightsHashKind: the weight files' bytes),
  // a full read of the files, for checking a record that carries it; empty for weights in memory.
  std::string legacy_weights_hash() const;
  // The hash under the definition `kind` names (kWeightsHashKind or kLegacyWeightsHashKind), to
  // check a record against this checkpoint; empty when it cannot be computed here (another kind,
  // or the legacy one for weights in memory).
  std::string weights_hash_of_kind(const std::string& kind);
  const PartSizes& part_sizes() const { return sizes_; }
  // The checkpoint's tensors as its files list them, filled at open from what the reader parses
  // there anyway (safetensors headers shard by shard, the GGUF tensor table, the tensors a
  // llama2.c header implies, a torch.save state dict read whole): inspect describes a checkpoint
  // through the reader that checks its layout. Empty for weights already in memory.
  const std::vector<TensorHeader>& tensors() const { return tensors_; }
  // The weight files' sizes on disk (0 for weights already in memory).
  std::uint64_t bytes_on_disk() const { return bytes_on_disk_; }
  // Bytes this reader holds in memory whatever is read (a checkpoint format read whole at open,
  // such as a torch.save zip, or weights already in memory); 0 for readers by offset.
  virtual std::int64_t resident_bytes() const { return 0; }
  // "by offset" for the file readers, "in memory" for resident ones (for the record's plan).
  virtual std::string access() const { return "by offset"; }

  // ids int64 [n] (any order, repeats allowed) → their embedding rows [n, D] float32.
  at::Tensor token_embedding_rows(const at::Tensor& ids);
  virtual at::Tensor position_embedding() = 0;  // [max_seq_len, D] float32, or undefined
  virtual BlockWeights block(std::int64_t layer) = 0;
  virtual NormWeights final_norm() = 0;
  // Rows [begin, begin + count) of the LM head, [count, D] float32 (of the embedding when tied).
  virtual at::Tensor lm_head_rows(std::int64_t begin, std::int64_t count) = 0;
  virtual at::Tensor lm_head_bias() { return {}; }  // [V] or undefined (only transforms make one)
  // The file ranges block(layer) reads, for reading them into the page cache ahead of it
  // (common/page_cache.h); empty where the reader does not know them or holds the weights.
  virtual std::vector<FileSpan> block_file_spans(std::int64_t /*layer*/) { return {}; }

  // Every part at once: what load_checkpoint returns.
  LoadedCheckpoint read_all();

 protected:
  friend class ModelReaderAccess;
  explicit ModelReader(LoadedCheckpoint info) : info_(std::move(info)) {}
  // Rows [begin, begin + count) of the token embedding.
  virtual at::Tensor token_embedding_block(std::int64_t begin, std::int64_t count) = 0;
  LoadedCheckpoint info_;  // weights left empty
  PartSizes sizes_;
  std::vector<std::filesystem::path> weight_files_;  // what legacy_weights_hash() hashes
  std::shared_ptr<TensorHashes> hashes_;  // what the reads have hashed (null: info_ has the hash)
  std::vector<TensorHeader> tensors_;
  std::uint64_t bytes_on_disk_ = 0;
};

// Detects the format as load_checkpoint does and opens it for reading by parts. Formats read by
// offset: Hugging Face and qeval safetensors folders, GGUF, llama2.c. A torch.save state dict is
// read whole at open (its resident_bytes() says so).
std::unique_ptr<ModelReader> open_checkpoint(const std::filesystem::path& path);

// A reader over weights already in memory (a loaded or transformed model): parts are views of
// them, so it serves every plan with the same values without reading any file.
std::unique_ptr<ModelReader> resident_reader(LoadedCheckpoint checkpoint);

}  // namespace qeval

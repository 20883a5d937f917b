#include "loaders/checkpoints/model_reader.h"

#include <algorithm>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/model_reader_internal.h"
#include "loaders/checkpoints/safetensors_set.h"
#include "loaders/checkpoints/weights_hash.h"

namespace qeval {

std::int64_t PartSizes::largest_block() const {
  std::int64_t largest = 0;
  for (std::int64_t b : blocks) largest = std::max(largest, b);
  return largest;
}

std::int64_t PartSizes::total() const {
  std::int64_t total = token_embedding + position_embedding + final_norm + lm_head;
  for (std::int64_t b : blocks) total += b;
  return total;
}

namespace {

std::int64_t float32_bytes(const at::Tensor& t) { return t.defined() ? t.numel() * 4 : 0; }



std::int64_t float32_bytes(const BlockWeights& b) {
  std::int64_t total = 0;
  for (const auto& [name, t] : named_tensors(b, 0)) total += float32_bytes(t);
  return total;
}

}  // namespace

void measure_parts(ModelReader& reader, PartSizes& sizes, const std::string& source) {
  const ModelConfig& c = reader.config();
  c.validate(source);
  ModelWeights w;  // meta tensors (or views): shapes only
  w.token_embedding = read_token_embedding_block(reader, 0, c.vocab_size);
  w.position_embedding = reader.position_embedding();
  sizes.token_embedding = float32_bytes(w.token_embedding);
  sizes.position_embedding = float32_bytes(w.position_embedding);
  sizes.blocks.clear();
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    w.blocks.push_back(reader.block(i));
    sizes.blocks.push_back(float32_bytes(w.blocks.back()));
  }
  w.final_norm = reader.final_norm();
  sizes.final_norm = float32_bytes(w.final_norm.weight) + float32_bytes(w.final_norm.bias);
  w.lm_head = c.tied_embeddings ? w.token_embedding : reader.lm_head_rows(0, c.vocab_size);
  w.lm_head_bias = reader.lm_head_bias();
  sizes.lm_head = c.tied_embeddings ? 0 : float32_bytes(w.lm_head);
  validate_weights(w, c, source);
}

at::Tensor ModelReader::token_embedding_rows(const at::Tensor& ids) {
  TORCH_CHECK(ids.dim() == 1 && ids.scalar_type() == at::kLong, "token_embedding_rows: ids must be int64 [n]");
  const at::Tensor cpu_ids = ids.cpu().contiguous();
  const std::int64_t n = cpu_ids.numel();
  const std::int64_t V = config().vocab_size;
  std::vector<std::int64_t> unique(cpu_ids.data_ptr<std::int64_t>(), cpu_ids.data_ptr<std::int64_t>() + n);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  QEVAL_CHECK(unique.empty() || (unique.front() >= 0 && unique.back() < V),
              "token_embedding_rows: token id {} outside the vocabulary of {}",
              unique.front() < 0 ? unique.front() : unique.back(), V);
  // Runs of consecutive ids are read as one block of rows.
  std::vector<at::Tensor> runs;
  for (std::size_t i = 0; i < unique.size();) {
    std::size_t j = i + 1;
    while (j < unique.size() && unique[j] == unique[j - 1] + 1) ++j;
    runs.push_back(token_embedding_block(unique[i], static_cast<std::int64_t>(j - i)));
    i = j;
  }
  if (runs.empty()) return at::empty({0, config().d_model}, at::kFloat);
  at::Tensor rows = runs.size() == 1 ? runs.front() : at::cat(runs, 0);  // [unique, D]
  at::Tensor table = at::tensor(unique, at::kLong);
  at::Tensor where = at::searchsorted(table, cpu_ids);  // position of each id among the unique ones
  return rows.index_select(0, where);
}

const std::string& ModelReader::weights_hash() {
  if (info_.weights_hash.empty() && hashes_) info_.weights_hash = hashes_->finish();
  return info_.weights_hash;
}

const char* ModelReader::weights_hash_kind() { return kWeightsHashKind; }

std::string ModelReader::legacy_weights_hash() const {
  return weight_files_.empty() ? std::string() : legacy_file_bytes_hash(weight_files_);
}

std::string ModelReader::weights_hash_of_kind(const std::string& kind) {
  if (kind == kWeightsHashKind) return weights_hash();
  if (kind == kLegacyWeightsHashKind) return legacy_weights_hash();
  return {};
}

LoadedCheckpoint ModelReader::read_all() {
  LoadedCheckpoint out = info_;
  const ModelConfig& c = config();
  ModelWeights& w = out.weights;
  w.token_embedding = token_embedding_block(0, c.vocab_size);
  w.position_embedding = position_embedding();
  for (std::int64_t i = 0; i < c.n_layers; ++i) w.blocks.push_back(block(i));
  w.final_norm = final_norm();
  w.lm_head = c.tied_embeddings ? w.token_embedding : lm_head_rows(0, c.vocab_size);
  w.lm_head_bias = lm_head_bias();
  validate_weights(w, c, info_.path.string());
  out.weights_hash = weights_hash();  // from the reads above: nothing is read twice
  return out;
}

at::Tensor read_token_embedding_block(ModelReader& reader, std::int64_t begin, std::int64_t count) {
  return ModelReaderAccess::token_embedding_block(reader, begin, count);
}

void list_safetensors(const SafetensorsSet& set, std::vector<TensorHeader>& tensors, std::uint64_t& bytes_on_disk) {
  for (const auto& file : set.files()) {
    bytes_on_disk += qeval::file_size(file->path());
    const std::string file_name = file->path().filename().string();
    for (const auto& name : file->names()) {
      const SafetensorsTensorInfo& info = file->info(name);
      tensors.push_back({name, info.dtype, info.shape, file_name, static_cast<std::int64_t>(info.end - info.begin)});
    }
  }
}

namespace {

// Weights already in memory: every part is a view of them.
class ResidentReader final : public ModelReader {
 public:
  ResidentReader(LoadedCheckpoint checkpoint, std::vector<TensorHeader> tensors, std::uint64_t bytes_on_disk)
      : ModelReader(std::move(checkpoint)) {
    tensors_ = std::move(tensors);
    bytes_on_disk_ = bytes_on_disk;
    weights_ = std::move(info_.weights);
    info_.weights = {};
    const std::string source = info_.path.empty() ? std::string("model") : info_.path.string();
    validate_weights(weights_, config(), source);
    measure_parts(*this, sizes_, source);
    for (const at::Tensor& t : all_tensors()) resident_ += t.numel() * static_cast<std::int64_t>(t.element_size());
    sizes_.stored = resident_;
  }
  std::int64_t resident_bytes() const override { return resident_; }
  std::string access() const override { return "in memory"; }

  at::Tensor position_embedding() override { return weights_.position_embedding; }
  BlockWeights block(std::int64_t layer) override {
    QEVAL_CHECK(layer >= 0 && layer < config().n_layers, "ResidentReader: no layer {}", layer);
    return weights_.blocks[static_cast<std::size_t>(layer)];
  }
  NormWeights final_norm() override { return weights_.final_norm; }
  at::Tensor lm_head_rows(std::int64_t begin, std::int64_t count) override {
    return weights_.lm_head.narrow(0, begin, count);
  }
  at::Tensor lm_head_bias() override { return weights_.lm_head_bias; }

 private:
  at::Tensor token_embedding_block(std::int64_t begin, std::int64_t count) override {
    return weights_.token_embedding.narrow(0, begin, count);
  }
  std::vector<at::Tensor> all_tensors() const {
    std::vector<at::Tensor> out{weights_.token_embedding, weights_.position_embedding, weights_.final_norm.weight,
                                weights_.final_norm.bias, weights_.lm_head_bias};
    if (!weights_.lm_head.is_same(weights_.token_embedding)) out.push_back(weights_.lm_head);
    for (const auto& b : weights_.blocks)
      for (const auto& [name, t] : named_tensors(b, 0)) out.push_back(t);
    std::vector<at::Tensor> defined;
    for (auto& t : out)
      if (t.defined()) defined.push_back(t);
    return defined;
  }

  ModelWeights weights_;
  std::int64_t resident_ = 0;
};

}  // namespace

std::unique_ptr<ModelReader> resident_reader(LoadedCheckpoint checkpoint) {
  return std::make_unique<ResidentReader>(std::move(checkpoint), std::vector<TensorHeader>{}, 0);
}

std::unique_ptr<ModelReader> resident_reader(LoadedCheckpoint checkpoint, std::vector<TensorHeader> tensors,
                                             std::uint64_t bytes_on_disk) {
  return std::make_unique<ResidentReader>(std::move(checkpoint), std::move(tensors), bytes_on_disk);
}

}  // namespace qeval

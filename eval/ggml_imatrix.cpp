#include "eval/ggml_imatrix.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/hash.h"
#include "model/block.h"
#include "model/linear.h"
#include "quant/schemes/ggml_rules.h"

namespace qeval {

std::shared_ptr<const GgmlImportanceWeights> load_ggml_importance(const std::filesystem::path& path,
                                                                  const ModelConfig& config) {
  std::error_code ec;
  QEVAL_CHECK(std::filesystem::exists(path, ec),
              "imatrix {}: no such file (a llama.cpp importance matrix, GGUF or legacy .dat)", path.string());
  QEVAL_CHECK(std::filesystem::is_regular_file(path, ec),
              "imatrix {}: not a regular file ({}); expected a llama.cpp importance matrix, GGUF or legacy .dat",
              path.string(), std::filesystem::is_directory(path, ec) ? "a folder" : "a device or other special file");
  const Imatrix file = read_imatrix(path);
  const GgmlImportance importance = ggml_importance(file, path);
  auto out = std::make_shared<GgmlImportanceWeights>();
  std::vector<std::string> names = model_linear_names(config);
  names.insert(names.begin(), "token_embedding");
  nlohmann::json without = nlohmann::json::array();
  std::int64_t with = 0;
  for (const std::string& name : names) {
    const GgufTensorRef ref = gguf_tensor_of(name, config.tied_embeddings);
    const std::int64_t columns = name == "token_embedding" ? config.d_model : linear_shape(config, name).in;
    const std::int64_t experts = ref.expert >= 0 ? config.moe_experts : 1;
    const GgmlImportanceEntry* e = importance.find(ref.name);
    // llama-quantize ignores a token_embd entry of another size and refuses any other.
    const bool usable = e != nullptr && (ref.name != "token_embd.weight" ||
                                         static_cast<std::int64_t>(e->values.size()) == experts * columns);
    if (!usable) {
      without.push_back(name);
      continue;
    }
    const at::Tensor rows = importance.tensor_for(ref.name, experts, columns);  // [experts, columns]
    out->by_name[name] = rows[ref.expert >= 0 ? ref.expert : 0].contiguous();
    ++with;
  }
  // llama-quantize warns per tensor and goes on; an imatrix none of whose entries is a tensor of this
  // model was collected from another model (or names tensors another way), and would change nothing.
  QEVAL_CHECK(with > 0 || importance.entries.empty(),
              "imatrix {}: none of its {} entries (e.g. {}) is a tensor of this model, which has {} (GGUF names); "
              "expected an imatrix collected from this model", path.string(), importance.entries.size(),
              importance.entries.begin()->first, gguf_tensor_of(names.size() > 1 ? names[1] : names[0], config.tied_embeddings).name);
  out->description = {{"file", path.string()},
                      {"hash", hash_file(path)},
                      {"format", file.legacy ? "legacy" : "gguf"},
                      {"datasets", file.datasets},
                      {"chunk_count", file.chunk_count},
                      {"chunk_size", file.chunk_size},
                      {"entries", file.entries.size()},
                      {"tensors_with", with},
                      {"tensors_without", without}};
  return out;
}

namespace {

// Σ x² per column and the token count of one linear's inputs, added in float32 token after token
// (llama-imatrix's acc[j] += x[j] * x[j]).
struct ColumnSums {
  std::vector<float> sums;
  std::int64_t count = 0;
};

class ImatrixStatistic {
 public:
  void record(const std::string& name, const at::Tensor& x) {
    const std::int64_t k = x.size(-1);
    const at::Tensor rows = x.detach().to(at::kCPU, at::kFloat).reshape({-1, k}).contiguous();
    std::lock_guard<std::mutex> lock(mutex_);
    ColumnSums& e = by_name_[name];
    if (e.sums.empty()) e.sums.assign(static_cast<std::size_t>(k), 0.0f);
    QEVAL_CHECK(static_cast<std::int64_t>(e.sums.size()) == k, "imatrix: linear {} had inputs of {} columns, now {}",
                name, e.sums.size(), k);
    const float* p = rows.data_ptr<float>();
    float* acc = e.sums.data();
    for (std::int64_t r = 0; r < rows.size(0); ++r, p += k)
      for (std::int64_t j = 0; j < k; ++j) acc[j] += p[j] * p[j];
    e.count += rows.size(0);
  }
  const std::map<std::string, ColumnSums>& by_name() const { return by_name_; }

 private:
  std::mutex mutex_;
  std::map<std::string, ColumnSums> by_name_;
};

class ImatrixLinear final : public LinearDecorator {
 public:
  ImatrixLinear(std::shared_ptr<const Linear> inner, std::shared_ptr<ImatrixStatistic> stat, std::string name)
      : LinearDecorator(std::move(inner)), stat_(std::move(stat)), name_(std::move(name)) {}
  at::Tensor forward(const at::Tensor& x) const override {
    stat_->record(name_, x);
    return inner_->forward(x);
  }

 private:
  std::shared_ptr<ImatrixStatistic> stat_;
  std::string name_;
};

}  // namespace

Imatrix collect_imatrix(ModelReader& model, WindowSource& windows, const ImatrixCollection& options) {
  QEVAL_CHECK(options.n_ctx >= 16, "imatrix: n_ctx (--seq-len) {} is below 16: llama-imatrix collects no product of "
              "fewer than 16 tokens, so it would collect nothing", options.n_ctx);
  const ModelConfig config = model.config();
  auto stat = std::make_shared<ImatrixStatistic>();
  std::vector<EvalScheme> schemes(1);
  schemes[0].name = "full";
  schemes[0].wrap_block = [stat](const Block& block) {
    Block out = block;
    for (const auto& named : block.linears())
      out.replace_linear(named.name, std::make_shared<ImatrixLinear>(named.linear, stat, named.name));
    return out;
  };
  EvalOptions eval;
  eval.progress = options.progress;
  eval.batch_size = std::max<std::int64_t>(options.batch_size, 1);
  eval.expected_windows = windows.expected_windows();
  const EvalResult result = evaluate(model, schemes, windows, eval);

  Imatrix m;
  m.datasets = {options.dataset};
  m.chunk_count = static_cast<std::int32_t>(result.windows);
  m.chunk_size = static_cast<std::int32_t>(options.n_ctx);
  m.has_metadata = true;
  for (const std::string& name : model_linear_names(config)) {
    if (name.rfind("layers.", 0) != 0) continue;  // the head: llama-imatrix without --process-output
    const GgufTensorRef ref = gguf_tensor_of(name, config.tied_embeddings);
    const std::int64_t k = linear_shape(config, name).in;
    const auto found = stat->by_name().find(name);
    if (ref.expert < 0) {
      if (found == stat->by_name().end()) continue;  // never ran (llama-imatrix has no entry either)
      ImatrixEntry& e = m.entries[ref.name];
      e.sums = found->second.sums;
      e.counts = {found->second.count};
      continue;
    }
    // One entry per expert tensor: row e for expert e, zeros where no token chose it.
    ImatrixEntry& e = m.entries[ref.name];
    if (e.counts.empty()) {
      e.sums.assign(static_cast<std::size_t>(config.moe_experts * k), 0.0f);
      e.counts.assign(static_cast<std::size_t>(config.moe_experts), 0);
    }
    if (found == stat->by_name().end()) continue;
    std::copy(found->second.sums.begin(), found->second.sums.end(), e.sums.begin() + ref.expert * k);
    e.counts[static_cast<std::size_t>(ref.expert)] = found->second.count;
  }
  return m;
}

}  // namespace qeval

#include "eval/evaluator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <optional>

#include "common/error.h"
#include "common/hash.h"
#include "common/memory.h"
#include "common/phases.h"
#include "eval/progress.h"
#include "kernels/device.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/norms.h"

namespace qeval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// How errors name a checkpoint a reader reads.
std::string checkpoint_source(const ModelReader& reader) {
  return reader.info().path.empty() ? std::string("model") : reader.info().path.string();
}

struct Batch {
  at::Tensor tokens;  // [B, L] int64 on the CPU
  std::vector<std::int64_t> indices, first_scored;
  std::int64_t size() const { return tokens.size(0); }
  std::int64_t length() const { return tokens.size(1); }
};

Batch make_batch(const std::vector<Window>& windows) {
  const auto B = static_cast<std::int64_t>(windows.size());
  const auto L = static_cast<std::int64_t>(windows.front().tokens.size());
  Batch batch;
  batch.tokens = at::empty({B, L}, at::kLong);
  auto* out = batch.tokens.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < B; ++b) {
    const Window& w = windows[static_cast<std::size_t>(b)];
    QEVAL_CHECK(static_cast<std::int64_t>(w.tokens.size()) == L, "evaluate: windows in a batch differ in length ({} vs {})",
                w.tokens.size(), L);
    for (std::int64_t l = 0; l < L; ++l) out[b * L + l] = w.tokens[static_cast<std::size_t>(l)];
    batch.indices.push_back(w.index);
    batch.first_scored.push_back(w.first_scored);
  }
  return batch;
}

// A scheme's observer with every callback charged to that scheme's statistics phase (a state-space
// layer's implicit attention is computed inside its callback, so it is charged there too).
class StatisticsTimer final : public ForwardObserver {
 public:
  StatisticsTimer(ForwardObserver& inner, int scheme) : inner_(inner), scheme_(scheme) {}
  void on_block_output(std::int64_t layer, const at::Tensor& hidden) override {
    PhaseScope p(Phase::statistics, scheme_);
    inner_.on_block_output(layer, hidden);
  }
  bool wants_attention(std::int64_t layer) const override { return inner_.wants_attention(layer); }
  void on_attention(std::int64_t layer, const at::Tensor& probs) override {
    PhaseScope p(Phase::statistics, scheme_);
    inner_.on_attention(layer, probs);
  }
  bool wants_attention_sums(std::int64_t layer, AttentionSumsRequest* request) const override {
    return inner_.wants_attention_sums(layer, request);
  }
  void on_attention_sums(std::int64_t layer, const AttentionSums& sums) override {
    PhaseScope p(Phase::statistics, scheme_);
    inner_.on_attention_sums(layer, sums);
  }
  bool wants_router(std::int64_t layer) const override { return inner_.wants_router(layer); }
  void on_router(std::int64_t layer, const at::Tensor& probs, const at::Tensor& selected) override {
    PhaseScope p(Phase::statistics, scheme_);
    inner_.on_router(layer, probs, selected);
  }
  bool wants_ssm_selection(std::int64_t layer) const override { return inner_.wants_ssm_selection(layer); }
  void on_ssm_selection(std::int64_t layer, const SsmSelection& selection) override {
    PhaseScope p(Phase::statistics, scheme_);
    inner_.on_ssm_selection(layer, selection);
  }

 private:
  ForwardObserver& inner_;
  int scheme_;
};

// The model's parts as the plan visits them, on the placement's device: full-precision blocks
// from the reader, each scheme's blocks derived from them, the head's vocabulary blocks. What
// the plan keeps is built once; the rest is built when reached and dropped when released.
class ModelParts {
 public:
  ModelParts(ModelReader& reader, std::vector<EvalScheme>& schemes, const Placement& placement, const EvalPlan& plan)
      : reader_(reader),
        schemes_(schemes),
        placement_(placement),
        plan_(plan),
        config_(std::make_shared<const ModelConfig>(reader.config())),
        source_(checkpoint_source(reader)),
        run_cache_(placement),
        full_blocks_(static_cast<std::size_t>(config_->n_layers)),
        scheme_blocks_(schemes.size(), std::vector<Built>(static_cast<std::size_t>(config_->n_layers))),
        head_linears_(schemes.size()),
        final_norms_(schemes.size()),
        position_embeddings_(schemes.size()),
        own_head_blocks_(schemes.size()) {
    for (std::size_t s = 0; s < schemes.size(); ++s) {
      ModelReader* own = schemes[s].own_checkpoint.get();
      if (s > 0 && !own) {  // derived from full precision: its final norm and positions
        final_norms_[s] = final_norms_[0];
        position_embeddings_[s] = position_embeddings_[0];
        continue;
      }
      PhaseScope read(Phase::read, s == 0 ? kNoScheme : static_cast<int>(s));
      ModelReader& from = own ? *own : reader_;
      const std::string source = own ? checkpoint_source(*own) : source_;
      const NormWeights norm = from.final_norm();
      check_finite(norm.weight, "final_norm.weight", source);
      check_finite(norm.bias, "final_norm.bias", source);
      final_norms_[s] = {run_cache_.move(norm.weight), run_cache_.move(norm.bias)};
      const at::Tensor position = from.position_embedding();
      check_finite(position, "position_embedding", source);
      position_embeddings_[s] = run_cache_.move(position);
    }
  }

  const ModelConfig& config() const { return *config_; }
  const std::shared_ptr<const ModelConfig>& shared_config() const { return config_; }

  // Whether scheme s's residual stream differs from full precision's from the embedding on.
  bool own_embedding(std::size_t s) const {
    return s > 0 && (schemes_[s].rewrite_embedding_rows || schemes_[s].own_checkpoint);
  }

  // The residual stream of a batch before block 0 (a fresh tensor: blocks add into it in place),
  // full precision's, or scheme s's when it rewrites the embedding rows or has its own checkpoint.
  at::Tensor embed(const Batch& batch, std::size_t s = 0) {
    check_tokens(batch.tokens, *config_);
    const at::Tensor ids = batch.tokens.reshape({-1});
    ModelReader* own = s > 0 ? schemes_[s].own_checkpoint.get() : nullptr;
    at::Tensor rows = [&] {
      PhaseScope read(Phase::read, own ? static_cast<int>(s) : kOuterScheme);
      return (own ? *own : reader_).token_embedding_rows(ids);
    }();
    // Only the rows a batch uses are read (a streamed plan never holds the whole table), so they
    // are checked per batch, and named by the table's own index [token id, column].
    if (const auto bad = first_non_finite(rows)) {
      const std::int64_t token = ids[bad->index[0]].item<std::int64_t>();
      fail("{}: tensor token_embedding holds a non-finite value: {} at index [{}, {}] (the row of token {}); a model "
           "with NaN or infinite weights yields no number",
           own ? checkpoint_source(*own) : source_, bad->value, token, bad->index[1], token);
    }
    if (s > 0 && schemes_[s].rewrite_embedding_rows) {
      PhaseScope quantize(Phase::quantize, static_cast<int>(s));
      rows = schemes_[s].rewrite_embedding_rows(rows);
    }
    PhaseScope forward(Phase::forward, static_cast<int>(s));
    at::Tensor placed = rows.to(placement_.device, placement_.dtype);
    if (placed.is_same(rows)) placed = rows.clone();  // a view of the reader's table must not be added into
    return embedding_stream(placed, batch.size(), batch.length(), *config_, position_embeddings_[s]);
  }

  const Block& block(std::size_t s, std::int64_t layer) {
    Built& slot = scheme_blocks_[s][static_cast<std::size_t>(layer)];
    if (!slot.block) {
      const Block& full = full_block(layer);
      const EvalScheme& scheme = schemes_[s];
      Block built = scheme.rewrite_block ? rewrite(s, full) : full;
      if (!placement_.is_default()) {
        PhaseScope copy(Phase::copy, static_cast<int>(s));
        built = built.placed(layer_cache(layer), /*keep_linear_sources=*/false);
      }
      if (scheme.wrap_block) built = scheme.wrap_block(built);
      slot.block.emplace(std::move(built));
    }
    return *slot.block;
  }

  // Whether scheme s's block of `layer` is full precision's own (no linear rewritten, nothing
  // watching it), so that its stream, still full precision's, need not be computed apart.
  bool same_as_full(std::size_t s, std::int64_t layer) const {
    const EvalScheme& scheme = schemes_[s];
    if (scheme.observer || scheme.begin_batch || scheme.wrap_block) return false;
    if (!scheme.rewrite_block) return true;
    return scheme.rewrites_layer && !scheme.rewrites_layer(layer);
  }

  // Starts reading `layer` on another thread (the file into pinned memory, the copy to the device
  // and the conversion there), so that it overlaps the current layer's compute; full_block()
  // takes the result. The schemes' rewrites run on the device when the block is reached.
  void prefetch(std::int64_t layer) {
    if (!plan_.prefetch_next_layer || layer >= config_->n_layers || prefetch_.valid()) return;
    if (full_blocks_[static_cast<std::size_t>(layer)]) return;  // kept from an earlier chunk
    const bool all_built = std::all_of(scheme_blocks_.begin(), scheme_blocks_.end(), [layer](const auto& blocks) {
      return blocks[static_cast<std::size_t>(layer)].block.has_value();
    });
    if (all_built) return;  // every scheme's block kept: nothing to read
    prefetch_layer_ = layer;
    prefetch_ = std::async(std::launch::async, [this, layer] { return read_full_block(layer); });
  }

  // Scheme s shares full precision's block of `layer`: its rewrite still sees the block (it selects
  // nothing there, so nothing is quantised), so that its report lists every layer.
  void note_shared(std::size_t s, std::int64_t layer) {
    if (schemes_[s].rewrite_block) rewrite(s, full_block(layer));
  }

  // The plan is done with scheme s's block of `layer` for this chunk.
  void release(std::size_t s, std::int64_t layer) {
    if (!plan_.keep_scheme_blocks) scheme_blocks_[s][static_cast<std::size_t>(layer)].block.reset();
  }
  // Every scheme is done with `layer` for this chunk.
  void release_layer(std::int64_t layer) {
    // On a device whose blocks are all kept placed, the host's float32 block has served its purpose.
    const bool placed_and_kept = plan_.keep_scheme_blocks && !placement_.is_default();
    if (plan_.keep_full_blocks && !placed_and_kept) return;
    full_blocks_[static_cast<std::size_t>(layer)].reset();
    layer_cache_.reset();
    if (!placement_.on_cpu()) kernels::release_cached_weights();
    // A plan tight on memory promises the peak of one layer: what this layer freed goes back to the
    // system now, not beside the next layer's weights (the allocator keeps freed memory otherwise).
    if (plan_.release_memory_per_layer) release_free_memory();
  }

  // Scheme s's final norm of its stream (its own checkpoint's, or full precision's).
  at::Tensor head_input(const at::Tensor& x, std::size_t s) const { return apply_norm(x, final_norms_[s], *config_); }

  // Logits of scheme s for vocabulary rows [begin, begin + n) at prediction positions [p0, p0 + np),
  // from its head input h [B, P, D]: [B, np, n]. Schemes with a rewritten head compute whole logits
  // once per batch (`whole`, kept by the caller).
  at::Tensor logits(std::size_t s, const at::Tensor& h, std::int64_t begin, std::int64_t n, std::int64_t p0,
                    std::int64_t np, at::Tensor& whole) {
    const EvalScheme& scheme = schemes_[s];
    if (scheme.rewrite_head) {
      if (!whole.defined()) whole = final_soft_cap(rewritten_head(s).forward(h), *config_);
      return whole.narrow(1, p0, np).narrow(-1, begin, n);
    }
    const Linear& head = scheme.own_checkpoint ? own_head_block(s, begin, n) : head_block(begin, n);
    return final_soft_cap(head.forward(h.narrow(1, p0, np)), *config_);
  }
  // The plan is done with the head's vocabulary blocks for this chunk.
  void release_head() {
    if (plan_.keep_full_blocks) return;
    head_blocks_.clear();
    for (auto& blocks : own_head_blocks_) blocks.clear();
  }

 private:
  Block rewrite(std::size_t s, const Block& full) {
    PhaseScope quantize(Phase::quantize, static_cast<int>(s));
    return schemes_[s].rewrite_block(full);
  }

  const Block& full_block(std::int64_t layer) {
    std::optional<Block>& slot = full_blocks_[static_cast<std::size_t>(layer)];
    if (!slot && prefetch_.valid() && prefetch_layer_ == layer) {
      PhaseScope wait(Phase::read);  // the other thread's read, as far as this one waits for it
      slot.emplace(prefetch_.get());  // rethrows what the other thread threw
    }
    if (!slot) slot.emplace(read_full_block(layer));
    return *slot;
  }

  // Layer `layer` in full precision, float32, where the schemes are built from it: on the CPU, or
  // on the placement's GPU. There the schemes' rewrites (weight quantisation) run on the device,
  // with the same bits as on the CPU (quant/quantize.cpp), and the reader copies the stored
  // weights to the device and converts them there (ReadFloatsOnto); readers of other formats
  // return CPU tensors, which are copied here.
  Block read_full_block(std::int64_t layer) {
    PhaseScope read(Phase::read);
    BlockWeights weights = [&] {
      if (placement_.on_cpu()) return reader_.block(layer);
      ReadFloatsOnto onto(placement_.device);
      return reader_.block(layer);
    }();
    // The next layer's bytes come from the disk while this one computes (a plan that prefetches
    // reads the whole next block on its own thread instead).
    if (!plan_.prefetch_next_layer && layer + 1 < config_->n_layers)
      warmer_.warm(reader_.block_file_spans(layer + 1));
    // The finiteness check reads every tensor whole; its maxima spare the per-tensor quantisers
    // (int8-moderate, -coarse) a pass of their own over each weight.
    const std::map<std::string, float> max_abs = checked_block_max_abs(weights, layer, source_);
    Block block(config_, layer, std::move(weights), source_, max_abs);
    if (placement_.on_cpu()) return block;
    PhaseScope copy(Phase::copy);
    PlacementCache float32_on_device(Placement{placement_.device, at::kFloat});
    return block.placed(float32_on_device, /*keep_linear_sources=*/false);
  }

  // Copies to the device are shared by every scheme of a layer (unquantised linears, norms). The
  // cache is the layer's only: it holds the host tensors it copied, which must not outlive the layer.
  PlacementCache& layer_cache(std::int64_t layer) {
    if (!layer_cache_ || layer_cache_layer_ != layer) {
      layer_cache_.emplace(placement_);
      layer_cache_layer_ = layer;
    }
    return *layer_cache_;
  }

  const Linear& head_block(std::int64_t begin, std::int64_t n) {
    auto it = head_blocks_.find(begin);
    if (it == head_blocks_.end()) {
      if (!plan_.keep_full_blocks) head_blocks_.clear();  // one block at a time
      PhaseScope read(Phase::read);
      at::Tensor w = reader_.lm_head_rows(begin, n);
      check_finite(w, fmt::format("lm_head (rows {} to {})", begin, begin + n - 1), source_);
      at::Tensor bias = reader_.lm_head_bias();
      if (bias.defined()) bias = bias.narrow(0, begin, n);
      std::shared_ptr<const Linear> linear = std::make_shared<FloatLinear>(w, bias);
      if (!placement_.is_default()) {
        PhaseScope copy(Phase::copy, kNoScheme);
        PlacementCache cache(placement_);
        linear = linear->placed(cache);
      }
      it = head_blocks_.emplace(begin, std::move(linear)).first;
    }
    return *it->second;
  }

  // Rows [begin, begin + n) of the LM head of scheme s's own checkpoint. Where they equal full
  // precision's (an artifact that left its head unquantised), full precision's block serves both,
  // so the rows are held once; which blocks are equal is found on the first read and remembered.
  const Linear& own_head_block(std::size_t s, std::int64_t begin, std::int64_t n) {
    auto same = head_rows_equal_.find({s, begin});
    if (same != head_rows_equal_.end() && same->second) return head_block(begin, n);
    auto& blocks = own_head_blocks_[s];
    auto it = blocks.find(begin);
    if (it != blocks.end()) return *it->second;
    if (!plan_.keep_full_blocks) blocks.clear();  // one block at a time
    ModelReader& own = *schemes_[s].own_checkpoint;
    at::Tensor w, bias;
    {
      PhaseScope read(Phase::read, static_cast<int>(s));
      w = own.lm_head_rows(begin, n);
      check_finite(w, fmt::format("lm_head (rows {} to {})", begin, begin + n - 1), checkpoint_source(own));
      bias = own.lm_head_bias();
      if (bias.defined()) bias = bias.narrow(0, begin, n);
      if (same == head_rows_equal_.end()) {
        const at::Tensor full_bias = reader_.lm_head_bias();
        const bool equal = at::equal(w, reader_.lm_head_rows(begin, n)) && bias.defined() == full_bias.defined() &&
                           (!bias.defined() || at::equal(bias, full_bias.narrow(0, begin, n)));
        head_rows_equal_[{s, begin}] = equal;
        if (equal) return head_block(begin, n);
      }
    }
    std::shared_ptr<const Linear> linear = std::make_shared<FloatLinear>(w, bias);
    if (!placement_.is_default()) {
      PhaseScope copy(Phase::copy, static_cast<int>(s));
      PlacementCache cache(placement_);
      linear = linear->placed(cache);
    }
    return *blocks.emplace(begin, std::move(linear)).first->second;
  }

  const Linear& rewritten_head(std::size_t s) {
    if (!head_linears_[s]) {
      const std::int64_t V = config_->vocab_size;
      std::shared_ptr<FloatLinear> full;
      {
        PhaseScope read(Phase::read);
        at::Tensor w = reader_.lm_head_rows(0, V);
        check_finite(w, "lm_head", source_);
        full = std::make_shared<FloatLinear>(w, reader_.lm_head_bias());
      }
      std::shared_ptr<const Linear> head;
      {
        PhaseScope quantize(Phase::quantize, static_cast<int>(s));
        head = schemes_[s].rewrite_head(full);
      }
      if (!placement_.is_default()) {
        PhaseScope copy(Phase::copy, static_cast<int>(s));
        head = head->placed(run_cache_);
      }
      head_linears_[s] = std::move(head);
    }
    return *head_linears_[s];
  }

  ModelReader& reader_;
  std::vector<EvalScheme>& schemes_;
  Placement placement_;
  EvalPlan plan_;
  std::shared_ptr<const ModelConfig> config_;
  std::string source_;
  PlacementCache run_cache_;
  std::optional<PlacementCache> layer_cache_;
  std::int64_t layer_cache_layer_ = -1;
  std::vector<NormWeights> final_norms_;          // per scheme
  std::vector<at::Tensor> position_embeddings_;   // per scheme (undefined without learned positions)
  std::vector<std::optional<Block>> full_blocks_;
  struct Built {
    std::optional<Block> block;
  };
  std::vector<std::vector<Built>> scheme_blocks_;  // [scheme][layer]
  std::map<std::int64_t, std::shared_ptr<const Linear>> head_blocks_;  // by first row
  std::vector<std::shared_ptr<const Linear>> head_linears_;            // rewritten heads, per scheme
  // Schemes with their own checkpoint: its head's vocabulary blocks, by first row, and whether
  // each block's rows equal full precision's (then full precision's block serves the scheme).
  std::vector<std::map<std::int64_t, std::shared_ptr<const Linear>>> own_head_blocks_;
  std::map<std::pair<std::size_t, std::int64_t>, bool> head_rows_equal_;
  std::future<Block> prefetch_;
  std::int64_t prefetch_layer_ = -1;
  PageCacheWarmer warmer_;  // its thread reads its own copy of the spans; joined when the parts go
};

// The progress line's view of where this evaluation's time went so far: its three largest phases.
std::string phase_shares(const PhaseTimes& at_start) {
  const PhaseTimes so_far = thread_phase_times() - at_start;
  const std::vector<Phase> order = so_far.largest_first();
  const double total = std::max(so_far.total(), 1e-9);
  std::string out;
  for (std::size_t k = 0; k < 3; ++k)
    out += fmt::format("{}{} {:.0f}%", k ? " " : "", phase_name(order[k]),
                       100 * so_far.seconds[static_cast<std::size_t>(order[k])] / total);
  return out;
}

// Names the first layer whose output was not finite, from per-layer flags (0-dim bool tensors).
std::string first_bad_layer(const std::vector<at::Tensor>& finite, std::int64_t row) {
  for (std::size_t layer = 0; layer < finite.size(); ++layer)
    if (!finite[layer][row].item<bool>())
      return fmt::format("the first non-finite hidden state is the output of layer {}", layer);
  return "the hidden states are finite after every layer: the LM head's logits are not";
}

}  // namespace

std::uint64_t window_hash(const Window& w) {
  Hasher h;
  h.update_value(w.first_scored);
  h.update(w.tokens.data(), w.tokens.size() * sizeof(std::int32_t));
  return h.digest();
}

std::string EvalResult::token_stream_hash() const {
  Hasher h;
  for (const auto& [index, hash] : window_hashes) {
    h.update_value(index);
    h.update_value(hash);
  }
  return h.hex();
}

EvalResult evaluate(ModelReader& full, std::vector<EvalScheme>& schemes, WindowSource& windows,
                    const EvalOptions& options, EvalResult resumed) {
  QEVAL_CHECK(!schemes.empty(), "evaluate: no schemes to evaluate");
  QEVAL_CHECK(options.batch_size >= 1, "evaluate: batch size must be >= 1, found {}", options.batch_size);
  EvalResult result = std::move(resumed);
  if (result.schemes.empty()) result.schemes.resize(schemes.size());
  QEVAL_CHECK(result.schemes.size() == schemes.size(), "evaluate: resumed state has {} schemes, this run has {}",
              result.schemes.size(), schemes.size());
  // On a GPU each phase boundary waits for the device, so that phases charge device time.
  std::optional<PhaseDeviceSync> device_time;
  if (!options.placement.on_cpu())
    device_time.emplace([device = options.placement.device] { kernels::synchronize(device); });
  const auto start = Clock::now();
  const PhaseTimes phases_at_start = thread_phase_times();
  Progress progress(options.progress, options.expected_windows);
  double running_nll = 0;
  for (const auto& [index, row] : result.schemes.front().rows) running_nll += row.nll_sum;

  ModelParts parts(full, schemes, options.placement, options.plan);
  const ModelConfig& config = parts.config();
  const std::int64_t layers = config.n_layers, V = config.vocab_size;
  const std::size_t S = schemes.size();
  // Each scheme's observer as the forward sees it: its callbacks charged to statistics.
  std::vector<std::unique_ptr<StatisticsTimer>> observers(S);
  for (std::size_t s = 0; s < S; ++s)
    if (schemes[s].observer) observers[s] = std::make_unique<StatisticsTimer>(*schemes[s].observer, static_cast<int>(s));
  const std::int64_t chunk_windows = std::max(options.plan.chunk_windows, options.batch_size);

  std::vector<Batch> chunk;
  std::int64_t chunk_size = 0;
  auto run_chunk = [&] {
    if (chunk.empty()) return;
    const std::int64_t done_before = result.windows;
    // Each scheme's residual stream per batch, and whether it stayed finite after each layer. A
    // scheme whose layers so far are full precision's shares full precision's stream (undefined
    // here) until the first layer that differs: it would compute the same bits.
    std::vector<std::vector<at::Tensor>> x(S, std::vector<at::Tensor>(chunk.size()));
    std::vector<std::vector<std::vector<at::Tensor>>> finite(S, std::vector<std::vector<at::Tensor>>(chunk.size()));
    std::vector<ForwardContext> contexts;
    for (std::size_t b = 0; b < chunk.size(); ++b) {
      x[0][b] = parts.embed(chunk[b]);
      contexts.push_back(make_forward_context(config, chunk[b].length(), x[0][b]));
      // A scheme that rewrites the embedding has a stream of its own from the start.
      for (std::size_t s = 1; s < S; ++s)
        if (parts.own_embedding(s)) x[s][b] = parts.embed(chunk[b], s);
    }
    for (std::int64_t layer = 0; layer < layers; ++layer) {
      for (std::size_t s = 1; s < S; ++s)
        if (!x[s][0].defined() && !parts.same_as_full(s, layer))
          for (std::size_t b = 0; b < chunk.size(); ++b) x[s][b] = x[0][b].clone();  // the layer's input
      for (std::size_t s = 1; s < S; ++s)
        if (!x[s][0].defined()) parts.note_shared(s, layer);
      if (options.plan.prefetch_next_layer) {
        // Every block of this layer first (the schemes' rewrites are not shared between threads),
        // then the next layer's host work on another thread while this one computes.
        for (std::size_t s = 0; s < S; ++s)
          if (s == 0 || x[s][0].defined()) parts.block(s, layer);
        parts.prefetch(layer + 1);
      }
      for (std::size_t s = 0; s < S; ++s) {
        EvalScheme& scheme = schemes[s];
        if (!x[s][0].defined()) {  // still full precision's stream: nothing of its own to run
          for (std::size_t b = 0; b < chunk.size(); ++b) finite[s][b].push_back(finite[0][b].back());
          continue;
        }
        const Block& block = parts.block(s, layer);  // read, rewritten and placed when the plan reaches it
        kernels::synchronize(options.placement.device);
        const auto t0 = Clock::now();
        {
          PhaseScope forward(Phase::forward, static_cast<int>(s));
          for (std::size_t b = 0; b < chunk.size(); ++b) {
            if (scheme.begin_batch) scheme.begin_batch(chunk[b].indices);
            block.forward(x[s][b], contexts[b], observers[s].get());
            if (observers[s]) observers[s]->on_block_output(layer, x[s][b]);
            finite[s][b].push_back(x[s][b].isfinite().reshape({x[s][b].size(0), -1}).all(1));
          }
          kernels::synchronize(options.placement.device);  // GPU work is asynchronous: time it whole
        }
        result.schemes[s].forward_seconds += seconds_since(t0);
        parts.release(s, layer);
      }
      parts.release_layer(layer);
      progress.update_partial(static_cast<double>(done_before) +
                                  static_cast<double>(chunk_size) * static_cast<double>(layer + 1) /
                                      static_cast<double>(layers + 1),
                              fmt::format("layer {}/{}, {}", layer + 1, layers, phase_shares(phases_at_start)));
    }
    // The head, vocabulary block by vocabulary block: every scheme's logits of a block against full precision's.
    std::vector<std::vector<at::Tensor>> h(S, std::vector<at::Tensor>(chunk.size()));
    std::vector<std::vector<at::Tensor>> whole(S, std::vector<at::Tensor>(chunk.size()));
    std::vector<VocabScorer> scorers;
    for (std::size_t b = 0; b < chunk.size(); ++b) {
      scorers.emplace_back(chunk[b].tokens, S);
      const std::int64_t P = chunk[b].length() - 1;
      for (std::size_t s = 0; s < S; ++s) {
        if (s > 0 && !x[s][b].defined() && !schemes[s].on_head_input) {
          h[s][b] = h[0][b];  // full precision's stream, so its head input
          continue;
        }
        PhaseScope head(Phase::head, static_cast<int>(s));
        const at::Tensor normed = parts.head_input(x[s][b].defined() ? x[s][b] : x[0][b], s);  // [B, L, D]
        if (schemes[s].on_head_input) schemes[s].on_head_input(normed);
        h[s][b] = normed.narrow(1, 0, P);  // the positions that predict a token
      }
      for (std::size_t s = 0; s < S; ++s) x[s][b] = at::Tensor();
    }
    // The head's GEMMs take kScoreRows positions at a time, so the logits in flight are one span
    // of one block per scheme whatever the window length.
    for (std::int64_t begin = 0; begin < V; begin += kVocabBlock) {
      const std::int64_t n = std::min(kVocabBlock, V - begin);
      for (std::size_t b = 0; b < chunk.size(); ++b) {
        const std::int64_t P = chunk[b].length() - 1;
        for (std::int64_t p0 = 0; p0 < P; p0 += kScoreRows) {
          const std::int64_t np = std::min(kScoreRows, P - p0);
          for (std::size_t s = 0; s < S; ++s) {
            const auto t0 = Clock::now();
            PhaseScope head(Phase::head, static_cast<int>(s));
            scorers[b].add(s, begin, p0, parts.logits(s, h[s][b], begin, n, p0, np, whole[s][b]));
            kernels::synchronize(options.placement.device);
            result.schemes[s].forward_seconds += seconds_since(t0);
          }
          PhaseScope head(Phase::head, kNoScheme);
          scorers[b].end_block();
        }
      }
    }
    parts.release_head();
    for (std::size_t b = 0; b < chunk.size(); ++b) {
      PhaseScope scoring(Phase::head, kNoScheme);
      const Batch& batch = chunk[b];
      const std::vector<TokenValues> values = scorers[b].finish();
      for (std::size_t s = 0; s < S; ++s) {
        const at::Tensor bad = values[s].nll.isfinite().logical_not().any(1);  // [B]
        for (std::int64_t row = 0; row < batch.size(); ++row)
          QEVAL_CHECK(!bad[row].item<bool>(), "scheme {}: window {}: the NLL is not finite; {}; no result is written",
                      schemes[s].name, batch.indices[static_cast<std::size_t>(row)],
                      first_bad_layer(finite[s][b], row));
      }
      for (std::size_t s = 0; s < S; ++s) {
        std::vector<WindowScores> rows = window_rows(values[s], values[0], batch.first_scored);
        for (std::size_t r = 0; r < rows.size(); ++r) {
          if (s == 0) {
            result.scored_tokens += rows[r].tokens;
            running_nll += rows[r].nll_sum;
          }
          result.schemes[s].rows[batch.indices[r]] = rows[r];
        }
        if (schemes[s].on_token_values) schemes[s].on_token_values(batch.indices, batch.first_scored, values[s], values[0]);
      }
      result.windows += batch.size();
      result.processed_tokens += batch.size() * batch.length();
    }
    chunk.clear();
    chunk_size = 0;
    progress.update(result.windows, std::exp(running_nll / static_cast<double>(std::max<std::int64_t>(result.scored_tokens, 1))),
                    result.scored_tokens);
    if (options.after_batch) options.after_batch(result);
  };

  std::vector<Window> pending;  // the batch being filled
  auto close_batch = [&] {
    if (pending.empty()) return;
    for (const Window& w : pending) result.window_hashes[w.index] = window_hash(w);
    chunk.push_back(make_batch(pending));
    chunk_size += static_cast<std::int64_t>(pending.size());
    pending.clear();
    if (chunk_size + options.batch_size > chunk_windows) run_chunk();
  };
  auto next_window = [&windows] {
    PhaseScope data(Phase::data, kNoScheme);
    return windows.next();
  };
  while (auto w = next_window()) {
    if (options.select_window && !options.select_window(w->index)) continue;
    if (result.contains(w->index)) continue;  // done before the run was interrupted
    // Protocol stride's last window may be shorter: batches hold equal lengths only.
    if (!pending.empty() && pending.front().tokens.size() != w->tokens.size()) close_batch();
    pending.push_back(std::move(*w));
    if (static_cast<std::int64_t>(pending.size()) == options.batch_size) close_batch();
  }
  close_batch();
  run_chunk();
  progress.finish();
  QEVAL_CHECK(result.windows > 0, "evaluate: the data gave no complete window ({} tokens from {} documents)",
              windows.stream_tokens(), windows.documents_read());
  result.seconds += seconds_since(start);
  return result;
}

std::unique_ptr<ModelReader> transformer_reader(const Transformer& model, LoadedCheckpoint origin) {
  origin.config = model.config();
  origin.weights = model.weights();
  return resident_reader(std::move(origin));
}

std::unique_ptr<ModelReader> transformer_reader(const Transformer& model, const std::string& source) {
  LoadedCheckpoint origin;
  origin.path = source;
  return transformer_reader(model, std::move(origin));
}

EvalResult evaluate(const Transformer& full, std::vector<EvalScheme>& schemes, WindowSource& windows,
                    const EvalOptions& options, EvalResult resumed) {
  std::unique_ptr<ModelReader> reader = transformer_reader(full);
  return evaluate(*reader, schemes, windows, options, std::move(resumed));
}

}  // namespace qeval

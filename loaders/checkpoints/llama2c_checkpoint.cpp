// llama2.c legacy (v0) checkpoints: a header of 7 int32 (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len; a negative vocab_size means an untied classifier follows),
// then float32 tensors in run.c's order:
//   tok_emb [V, D], rms_att [L, D], wq [L, D, D], wk [L, KV, D], wv [L, KV, D], wo [L, D, D],
//   rms_ffn [L, D], w1 [L, F, D], w2 [L, D, F], w3 [L, F, D], rms_final [D],
//   freq_cis_real [S, hd/2], freq_cis_imag [S, hd/2], (wcls [V, D] when untied)
// with KV = D * n_kv_heads / n_heads. Matrices are already [out, in]. run.c's model: RMSNorm
// with eps 1e-5, interleaved rotary pairs with theta 10000 (the freq_cis tables are present
// only for old run.c versions: they are read, compared with theta 10000 and otherwise ignored),
// SwiGLU with w1 = gate, w3 = up, w2 = down, BOS 1, EOS 2.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "loaders/checkpoints/weights_hash.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/model_reader_internal.h"
#include "model/config_validation.h"

#include <map>

namespace qeval {

namespace fs = std::filesystem;

namespace {

// Far above any llama2.c model, low enough that no size product below can overflow 64 bits.
constexpr std::int64_t kMaxDim = 1 << 20;

// The file's float32 tensors by name and offset, in run.c's order; read by rows on demand.
class Float32Layout {
 public:
  // Every read's bytes go to `hashes` (the weights hash, loaders/checkpoints/weights_hash.h).
  Float32Layout(fs::path path, std::uint64_t offset, std::shared_ptr<TensorHashes> hashes)
      : path_(std::move(path)), next_(offset), hashes_(std::move(hashes)) {}
  // Appends the next tensor of `shape` (stacked per layer when `layers` > 0: [layers, ...shape]).
  void add(const std::string& name, std::vector<std::int64_t> shape) {
    std::int64_t numel = 1;
    for (std::int64_t d : shape) numel *= d;
    entries_[name] = {next_, shape};
    hashes_->add(name, "F32", shape, path_, next_, static_cast<std::uint64_t>(numel) * 4);
    next_ += static_cast<std::uint64_t>(numel) * 4;
  }
  // Rows [begin, begin + count) of the first axis of `name`, [count, ...].
  at::Tensor rows(const std::string& name, std::int64_t begin, std::int64_t count) const {
    const Entry& e = entries_.at(name);
    std::vector<std::int64_t> shape = e.shape;
    std::int64_t row = 1;
    for (std::size_t d = 1; d < shape.size(); ++d) row *= shape[d];
    QEVAL_CHECK(begin >= 0 && count >= 0 && begin + count <= shape[0], "{}: tensor {}: rows [{}, {}) of {} asked for",
                path_.string(), name, begin, begin + count, shape[0]);
    shape[0] = count;
    at::Tensor t = at::empty(shape, at::kFloat);
    const auto bytes = static_cast<std::streamsize>(count * row * 4);
    std::ifstream in(path_, std::ios::binary);
    QEVAL_CHECK(in.good(), "cannot open {}", path_.string());
    in.seekg(static_cast<std::streamoff>(e.offset + static_cast<std::uint64_t>(begin * row * 4)));
    in.read(static_cast<char*>(t.data_ptr()), bytes);
    QEVAL_CHECK(in.gcount() == bytes, "{}: short read in tensor {} (file changed while loading?)", path_.string(), name);
    hashes_->saw(name, static_cast<std::uint64_t>(begin * row * 4), t.data_ptr(), static_cast<std::uint64_t>(bytes));
    return t;
  }
  at::Tensor whole(const std::string& name) const { return rows(name, 0, entries_.at(name).shape[0]); }
  // One layer of a stacked tensor: [shape[1:]].
  at::Tensor layer(const std::string& name, std::int64_t i) const { return rows(name, i, 1).squeeze(0); }

 private:
  struct Entry {
    std::uint64_t offset = 0;
    std::vector<std::int64_t> shape;
  };
  fs::path path_;
  std::uint64_t next_;
  std::shared_ptr<TensorHashes> hashes_;
  std::map<std::string, Entry> entries_;
};

class Llama2cReader final : public ModelReader {
 public:
  Llama2cReader(LoadedCheckpoint info, Float32Layout layout, PartSizes sizes, std::vector<TensorHeader> tensors,
                std::shared_ptr<TensorHashes> hashes)
      : ModelReader(std::move(info)), layout_(std::move(layout)) {
    sizes_ = std::move(sizes);
    weight_files_ = {info_.path};
    hashes_ = std::move(hashes);
    tensors_ = std::move(tensors);
    bytes_on_disk_ = qeval::file_size(info_.path);
  }
  at::Tensor position_embedding() override { return at::Tensor(); }
  BlockWeights block(std::int64_t i) override {
    BlockWeights b;
    b.attn_norm.weight = layout_.layer("rms_att", i);
    b.q.weight = layout_.layer("wq", i);
    b.k.weight = layout_.layer("wk", i);
    b.v.weight = layout_.layer("wv", i);
    b.o.weight = layout_.layer("wo", i);
    b.mlp_norm.weight = layout_.layer("rms_ffn", i);
    b.gate.weight = layout_.layer("w1", i);
    b.down.weight = layout_.layer("w2", i);
    b.up.weight = layout_.layer("w3", i);
    return b;
  }
  NormWeights final_norm() override { return {layout_.whole("rms_final"), at::Tensor()}; }
  at::Tensor lm_head_rows(std::int64_t begin, std::int64_t count) override {
    return layout_.rows(config().tied_embeddings ? "tok_emb" : "wcls", begin, count);
  }

 private:
  at::Tensor token_embedding_block(std::int64_t begin, std::int64_t count) override {
    return layout_.rows("tok_emb", begin, count);
  }
  Float32Layout layout_;
};

}  // namespace

Llama2cHeader read_llama2c_header(const fs::path& path) {
  const std::string file = path.string();
  const std::uint64_t size = qeval::file_size(path);
  QEVAL_CHECK(size >= 28, "{}: truncated llama2.c checkpoint of {} bytes; expected a 28-byte header (7 int32)", file,
              size);
  Llama2cHeader out;
  std::array<std::int32_t, 7>& h = out.words;
  {
    std::ifstream in(path, std::ios::binary);
    QEVAL_CHECK(in.good(), "cannot open {}", file);
    in.read(reinterpret_cast<char*>(h.data()), 28);
  }
  out.shared_classifier = h[5] > 0;
  const std::string header = fmt::format("dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, vocab_size {}, seq_len {}",
                                         h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
  // The header through the one validator (model/config_validation.h), before any size is computed from it.
  ModelConfig& c = out.config;
  ConfigSource src(file, "header field {}");
  try {
    c.architecture = "llama";
    c.d_model = src.integer_value(ConfigField::d_model, "dim", h[0]);
    c.d_ff = src.integer_value(ConfigField::d_ff, "hidden_dim", h[1]);
    c.n_layers = src.integer_value(ConfigField::n_layers, "n_layers", h[2]);
    c.n_heads = src.integer_value(ConfigField::n_heads, "n_heads", h[3]);
    c.n_kv_heads = src.integer_value(ConfigField::n_kv_heads, "n_kv_heads", h[4]);
    c.vocab_size = src.integer_value(ConfigField::vocab_size, "vocab_size (absolute value)", std::abs(static_cast<std::int64_t>(h[5])));
    c.max_seq_len = src.integer_value(ConfigField::max_seq_len, "seq_len", h[6]);
    c.norm = NormKind::rmsnorm;
    c.norm_eps = 1e-5;
    c.position = PositionKind::rope;
    c.rope_pairing = RopePairing::interleaved;
    c.rope_theta = 10000.0;
    c.mlp = MlpKind::swiglu;
    c.tied_embeddings = out.shared_classifier;
    c.bos_id = 1;
    c.eos_id = 2;
    c.validate(src);
  } catch (const Error& e) {
    fail("{} (llama2.c v0 header: {}; not a llama2.c checkpoint?)", e.what(), header);
  }
  for (std::int64_t v : {c.d_model, c.d_ff, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.max_seq_len})
    QEVAL_CHECK(v > 0 && v <= kMaxDim, "{}: llama2.c header ({}) has a value outside 1..{}; not a llama2.c v0 checkpoint?",
                file, header, kMaxDim);
  const std::int64_t D = c.d_model, F = c.d_ff, L = c.n_layers, V = c.vocab_size, S = c.max_seq_len;
  const std::int64_t hd = D / c.n_heads, KV = D * c.n_kv_heads / c.n_heads;
  out.floats = V * D + L * D + L * D * D + 2 * L * KV * D + L * D * D + L * D + 3 * L * F * D + D + 2 * S * (hd / 2) +
               (out.shared_classifier ? 0 : V * D);
  // floats < 2^63 (each term is a product of values <= 2^20), but 4 * floats may pass 2^64:
  // compare in floats, not bytes.
  const std::uint64_t expected = out.floats <= (UINT64_MAX - 28) / 4 ? 28 + 4 * out.floats : UINT64_MAX;
  QEVAL_CHECK((size - 28) % 4 == 0 && (size - 28) / 4 == out.floats, "{}: llama2.c header ({}) implies {} bytes, but the file has {} ({} {} bytes){}", file,
              header, expected, size, size < expected ? "missing" : "extra",
              size < expected ? expected - size : size - expected,
              size < expected ? "; truncated?" : "; not a v0 checkpoint, or a different layout?");
  return out;
}

std::unique_ptr<ModelReader> open_llama2c_checkpoint(const fs::path& path) {
  const Llama2cHeader header = read_llama2c_header(path);
  const std::array<std::int32_t, 7>& h = header.words;
  const bool shared = header.shared_classifier;
  const ModelConfig& hc = header.config;
  const std::int64_t D = hc.d_model, F = hc.d_ff, L = hc.n_layers, V = hc.vocab_size, S = hc.max_seq_len;
  const std::int64_t hd = D / hc.n_heads, KV = D * hc.n_kv_heads / hc.n_heads;

  // Every tensor of the file is in the weights hash, the freq_cis tables too (they are read here).
  auto hashes = std::make_shared<TensorHashes>();
  Float32Layout layout(path, 28, hashes);
  layout.add("tok_emb", {V, D});
  layout.add("rms_att", {L, D});
  layout.add("wq", {L, D, D});
  layout.add("wk", {L, KV, D});
  layout.add("wv", {L, KV, D});
  layout.add("wo", {L, D, D});
  layout.add("rms_ffn", {L, D});
  layout.add("w1", {L, F, D});
  layout.add("w2", {L, D, F});
  layout.add("w3", {L, F, D});
  layout.add("rms_final", {D});
  layout.add("freq_cis_real", {S, hd / 2});
  layout.add("freq_cis_imag", {S, hd / 2});
  if (!shared) layout.add("wcls", {V, D});
  const at::Tensor freq_real = layout.whole("freq_cis_real"), freq_imag = layout.whole("freq_cis_imag");

  LoadedCheckpoint out;
  out.config = hc;

  // The stored tables should be cos/sin of pos * 10000^(-2i/hd); say how far they are.
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor angles = at::outer(at::arange(S, opts), at::pow(10000.0, -at::arange(0, hd, 2, opts) / double(hd)));
  const double table_error = std::max((freq_real.to(at::kDouble) - angles.cos()).abs().max().item<double>(),
                                      (freq_imag.to(at::kDouble) - angles.sin()).abs().max().item<double>());
  out.format = "llama2c";
  out.path = path;
  out.notes["header"] = {{"dim", h[0]},      {"hidden_dim", h[1]}, {"n_layers", h[2]}, {"n_heads", h[3]},
                         {"n_kv_heads", h[4]}, {"vocab_size", h[5]}, {"seq_len", h[6]}};
  out.notes["shared_classifier"] = shared;
  out.notes["freq_cis"] = fmt::format(
      "present and ignored: rotary angles are computed from rope_theta 10000 (largest difference from the stored "
      "tables {:.3g})",
      table_error);
  out.notes["positions"] = "rope: seq_len is recorded as max_seq_len, not a limit on evaluation windows";
  out.notes["norm_eps"] = "1e-5, as llama2.c run.c uses";
  // Every part's size follows from the header (the file size was checked against it above).
  PartSizes sizes;
  sizes.token_embedding = V * D * 4;
  sizes.blocks.assign(static_cast<std::size_t>(L), (2 * D + 2 * D * D + 2 * KV * D + 3 * F * D) * 4);
  sizes.final_norm = D * 4;
  sizes.lm_head = shared ? 0 : V * D * 4;
  sizes.stored = static_cast<std::int64_t>(header.floats * 4);
  // The table lists the weights the header implies, stacked per layer as the file stores them;
  // the freq_cis tables are not weights (read above only to note how far they are from theta 10000).
  std::vector<TensorHeader> tensors;
  const std::string file = path.filename().string();
  for (auto [name, shape] : std::vector<std::pair<const char*, std::vector<std::int64_t>>>{
           {"tok_emb", {V, D}},    {"rms_att", {L, D}}, {"wq", {L, D, D}},   {"wk", {L, KV, D}},
           {"wv", {L, KV, D}},     {"wo", {L, D, D}},   {"rms_ffn", {L, D}}, {"w1", {L, F, D}},
           {"w2", {L, D, F}},      {"w3", {L, F, D}},   {"rms_final", {D}}})
    tensors.push_back({name, "F32", shape, file});
  if (!shared) tensors.push_back({"wcls", "F32", {V, D}, file});
  return std::make_unique<Llama2cReader>(std::move(out), std::move(layout), std::move(sizes), std::move(tensors),
                                         std::move(hashes));
}

LoadedCheckpoint load_llama2c_checkpoint(const fs::path& path) { return open_llama2c_checkpoint(path)->read_all(); }

}  // namespace qeval

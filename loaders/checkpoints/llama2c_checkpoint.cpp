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
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "model/config_validation.h"

namespace qeval {

namespace fs = std::filesystem;

namespace {

// Far above any llama2.c model, low enough that no size product below can overflow 64 bits.
constexpr std::int64_t kMaxDim = 1 << 20;

class FloatReader {
 public:
  FloatReader(const fs::path& path, std::uint64_t offset) : path_(path), in_(path, std::ios::binary) {
    QEVAL_CHECK(in_.good(), "cannot open {}", path.string());
    in_.seekg(static_cast<std::streamoff>(offset));
  }
  // Next numel floats as a tensor of `shape`; `name` for messages.
  at::Tensor next(const std::vector<std::int64_t>& shape, const char* name) {
    at::Tensor t = at::empty(shape, at::kFloat);
    const auto bytes = static_cast<std::streamsize>(t.numel() * 4);
    in_.read(static_cast<char*>(t.data_ptr()), bytes);
    QEVAL_CHECK(in_.gcount() == bytes, "{}: short read in tensor {} (file changed while loading?)", path_.string(),
                name);
    return t;
  }

 private:
  fs::path path_;
  std::ifstream in_;
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

LoadedCheckpoint load_llama2c_checkpoint(const fs::path& path) {
  const std::string file = path.string();
  LoadedCheckpoint out;
  const Llama2cHeader header = read_llama2c_header(path);
  out.config = header.config;
  ModelConfig& c = out.config;
  const std::array<std::int32_t, 7>& h = header.words;
  const bool shared = header.shared_classifier;
  const std::int64_t D = c.d_model, F = c.d_ff, L = c.n_layers, V = c.vocab_size, S = c.max_seq_len;
  const std::int64_t hd = D / c.n_heads, KV = D * c.n_kv_heads / c.n_heads;

  FloatReader r(path, 28);
  ModelWeights w;
  w.token_embedding = r.next({V, D}, "tok_emb");
  at::Tensor rms_att = r.next({L, D}, "rms_att"), wq = r.next({L, D, D}, "wq"), wk = r.next({L, KV, D}, "wk"),
             wv = r.next({L, KV, D}, "wv"), wo = r.next({L, D, D}, "wo"), rms_ffn = r.next({L, D}, "rms_ffn"),
             w1 = r.next({L, F, D}, "w1"), w2 = r.next({L, D, F}, "w2"), w3 = r.next({L, F, D}, "w3");
  w.final_norm.weight = r.next({D}, "rms_final");
  at::Tensor freq_real = r.next({S, hd / 2}, "freq_cis_real"), freq_imag = r.next({S, hd / 2}, "freq_cis_imag");
  w.lm_head = shared ? w.token_embedding : r.next({V, D}, "wcls");
  for (std::int64_t i = 0; i < L; ++i) {
    BlockWeights b;  // slices of the stacked tensors along the layer axis stay contiguous
    b.attn_norm.weight = rms_att[i];
    b.q.weight = wq[i];
    b.k.weight = wk[i];
    b.v.weight = wv[i];
    b.o.weight = wo[i];
    b.mlp_norm.weight = rms_ffn[i];
    b.gate.weight = w1[i];
    b.down.weight = w2[i];
    b.up.weight = w3[i];
    w.blocks.push_back(std::move(b));
  }

  validate_weights(w, c, file);

  // The stored tables should be cos/sin of pos * 10000^(-2i/hd); say how far they are.
  auto opts = at::TensorOptions().dtype(at::kDouble);
  at::Tensor angles = at::outer(at::arange(S, opts), at::pow(10000.0, -at::arange(0, hd, 2, opts) / double(hd)));
  const double table_error = std::max((freq_real.to(at::kDouble) - angles.cos()).abs().max().item<double>(),
                                      (freq_imag.to(at::kDouble) - angles.sin()).abs().max().item<double>());
  out.weights = std::move(w);
  out.format = "llama2c";
  out.path = path;
  out.weights_hash = hash_file(path);
  out.notes["header"] = {{"dim", h[0]},      {"hidden_dim", h[1]}, {"n_layers", h[2]}, {"n_heads", h[3]},
                         {"n_kv_heads", h[4]}, {"vocab_size", h[5]}, {"seq_len", h[6]}};
  out.notes["shared_classifier"] = shared;
  out.notes["freq_cis"] = fmt::format(
      "present and ignored: rotary angles are computed from rope_theta 10000 (largest difference from the stored "
      "tables {:.3g})",
      table_error);
  out.notes["positions"] = "rope: seq_len is recorded as max_seq_len, not a limit on evaluation windows";
  out.notes["norm_eps"] = "1e-5, as llama2.c run.c uses";
  return out;
}

}  // namespace qeval

// Protocol `gptq-c4`: GPTQ's C4 evaluation windows, drawn exactly as IST-DASLab/gptq's
// datautils.py get_c4 draws them (see loaders/protocols/protocol.h):
//
//   random.seed(0)
//   for _ in range(256):
//       while True:
//           i = random.randint(0, len(valdata) - 1)
//           tmp = tokenizer(valdata[i]['text'], return_tensors='pt')
//           if tmp.input_ids.shape[1] >= seqlen: break
//       i = random.randint(0, tmp.input_ids.shape[1] - seqlen - 1)
//       j = i + seqlen
//       valenc.append(tmp.input_ids[:, i:j])
//
// The draws equal GPTQ's when the document list is the same file in the same order (GPTQ:
// en/c4-validation.00000-of-00008.json.gz, 45,576 documents), the tokenizer gives HF's ids
// (HF's LlamaTokenizer adds BOS, GPT-2's adds nothing: bos auto) and seq_len/count/seed match.
#include <fmt/format.h>

#include <set>

#include "common/error.h"
#include "loaders/protocols/protocol_internal.h"
#include "loaders/protocols/python_random.h"

namespace qeval {

namespace {

constexpr std::int64_t kGptqShardDocuments = 45576;  // len(valdata) for c4-validation.00000-of-00008

class GptqC4Source : public WindowSource {
 public:
  GptqC4Source(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer, ProtocolSpec spec,
               std::string source_name)
      : tokenizer_(tokenizer), spec_(std::move(spec)), source_(std::move(source_name)), format_(documents->format()) {
    bos_ = resolve_bos(spec_.bos, &tokenizer_, spec_.name);
    // Every document text, so that randint's index can address it.
    while (auto d = documents->next()) texts_.push_back(std::move(*d));
    QEVAL_CHECK(!texts_.empty(), "{}: protocol gptq-c4 found no documents", source_);
    rng_.seed_int(spec_.sample_seed.value_or(0));
  }

  std::optional<Window> next() override {
    if (next_index_ >= spec_.max_windows) return std::nullopt;
    const auto D = static_cast<std::int64_t>(texts_.size());
    std::vector<std::int32_t> ids;
    while (true) {
      const std::int64_t i = rng_.randint(0, D - 1);
      ++document_draws_;
      if (short_.count(i)) continue;  // known to be too short: GPTQ re-tokenises it, to the same result
      ids = encode(i);
      if (static_cast<std::int64_t>(ids.size()) >= spec_.seq_len) break;
      short_.insert(i);
      // Python would loop forever; say why instead.
      QEVAL_CHECK(static_cast<std::int64_t>(short_.size()) < D,
                  "{}: protocol gptq-c4: none of the {} documents has >= {} tokens (seq_len)", source_, D, spec_.seq_len);
    }
    Window w;
    w.index = next_index_++;
    const auto length = static_cast<std::int64_t>(ids.size());
    std::int64_t offset = 0;
    if (length == spec_.seq_len)
      ++equal_length_documents_;  // GPTQ's randint(0, -1) raises here; take the whole document
    else
      offset = rng_.randint(0, length - spec_.seq_len - 1);
    w.tokens.assign(ids.begin() + offset, ids.begin() + offset + spec_.seq_len);
    w.first_scored = 1;
    return w;
  }

  std::int64_t documents_read() const override { return static_cast<std::int64_t>(texts_.size()); }
  std::int64_t stream_tokens() const override { return tokens_encoded_; }
  std::string data_format() const override { return format_; }
  std::int64_t expected_windows() const override { return spec_.max_windows; }

  nlohmann::json facts() const override {
    const std::string file = std::filesystem::path(source_).filename().string();
    const bool gptq_file = file.rfind("c4-validation.00000-of-00008.json", 0) == 0;
    const bool gptq_list = gptq_file && static_cast<std::int64_t>(texts_.size()) == kGptqShardDocuments;
    const bool gptq_params = spec_.seq_len == 2048 && spec_.max_windows == 256 && spec_.sample_seed.value_or(0) == 0;
    const bool hf_bos = spec_.bos == BosMode::auto_;
    nlohmann::json j = {{"random", "CPython random: MT19937, seed(int) via init_by_array, randint via getrandbits "
                                   "rejection (reproduced bit for bit)"},
                        {"documents", texts_.size()},
                        {"documents_held", "all texts in memory, drawn by index"},
                        {"document_draws", document_draws_},
                        {"documents_too_short", short_.size()},
                        {"equal_length_documents", equal_length_documents_},
                        {"bos_id", id_json(bos_)},
                        {"bos_as_hf_tokenizer", hf_bos},
                        {"gptq_document_list", gptq_list},
                        {"gptq_parameters", gptq_params},
                        {"exact", gptq_list && gptq_params && hf_bos && equal_length_documents_ == 0}};
    j["exact_means"] =
        "the same windows as GPTQ's get_c4: same shard file and document count (45,576), seq_len 2048, 256 samples, "
        "seed 0, HF's BOS convention; the tokenizer is assumed to equal HF's (qeval's tokenizers are tested against it)";
    if (!gptq_list)
      j["approximation"] = fmt::format(
          "GPTQ's draws reproduced on a different document list ({} documents from {}), so the windows are not GPTQ's",
          texts_.size(), file);
    return j;
  }

 private:
  std::vector<std::int32_t> encode(std::int64_t i) {
    std::vector<std::int32_t> ids;
    if (bos_) ids.push_back(*bos_);  // HF tokenizer(text) with add_special_tokens: BOS first for Llama
    std::vector<std::int32_t> body = tokenizer_.encode(texts_[static_cast<std::size_t>(i)]);
    ids.insert(ids.end(), body.begin(), body.end());
    tokens_encoded_ += static_cast<std::int64_t>(ids.size());
    return ids;
  }

  const Tokenizer& tokenizer_;
  ProtocolSpec spec_;
  std::string source_, format_;
  std::optional<std::int32_t> bos_;
  std::vector<std::string> texts_;
  PythonRandom rng_;
  std::set<std::int64_t> short_;
  std::int64_t next_index_ = 0, document_draws_ = 0, equal_length_documents_ = 0, tokens_encoded_ = 0;
};

}  // namespace

std::unique_ptr<WindowSource> make_gptq_c4_source(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer,
                                                  ProtocolSpec spec, const std::string& source_name) {
  return std::make_unique<GptqC4Source>(std::move(documents), tokenizer, std::move(spec), source_name);
}

}  // namespace qeval

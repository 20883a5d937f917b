// Protocol `stride` (Hugging Face sliding window) and `llamacpp` (llama.cpp's perplexity
// chunks): both cut the one token stream; see loaders/protocols/protocol.h for the definitions.
#include <algorithm>

#include "common/error.h"
#include "loaders/protocols/protocol_internal.h"

namespace qeval {

namespace {

class StrideSource : public WindowSource {
 public:
  StrideSource(std::unique_ptr<TokenSupply> supply, ProtocolSpec spec, nlohmann::json facts)
      : supply_(std::move(supply)), spec_(std::move(spec)), facts_(std::move(facts)) {
    QEVAL_CHECK(spec_.seq_len >= 2 && spec_.stride >= 1, "protocol stride: seq_len {} and stride {} must be >= 2 and >= 1",
                spec_.seq_len, spec_.stride);
  }

  std::optional<Window> next() override {
    if (done_ || (spec_.max_windows > 0 && next_index_ >= spec_.max_windows)) return std::nullopt;
    // Hold tokens [begin, begin + seq_len] — one more than the window, to know whether the
    // window ends the stream (HF stops when end == N).
    const std::int64_t want = begin_ + spec_.seq_len + 1;
    while (buffer_start_ + static_cast<std::int64_t>(buffer_.size()) < want && !exhausted_)
      if (!supply_->append(buffer_)) exhausted_ = true;
    const std::int64_t available = buffer_start_ + static_cast<std::int64_t>(buffer_.size());
    const std::int64_t end = std::min(begin_ + spec_.seq_len, available);
    if (end - begin_ < 2) {  // nothing left to score (at most one token)
      done_ = true;
      return std::nullopt;
    }
    Window w;
    w.index = next_index_++;
    w.tokens.assign(buffer_.begin() + (begin_ - buffer_start_), buffer_.begin() + (end - buffer_start_));
    const std::int64_t length = end - begin_, target_length = end - prev_end_;
    // HF masks all but the last trg_len labels, and a window's first token is never a target.
    w.first_scored = std::max<std::int64_t>(1, length - target_length);
    prev_end_ = end;
    if (exhausted_ && end == available) done_ = true;
    begin_ += spec_.stride;
    const std::int64_t drop = std::min<std::int64_t>(begin_ - buffer_start_, static_cast<std::int64_t>(buffer_.size()));
    if (drop > 0) {
      buffer_.erase(buffer_.begin(), buffer_.begin() + drop);
      buffer_start_ += drop;
    }
    return w;
  }
  std::int64_t documents_read() const override { return supply_->documents_read(); }
  std::int64_t stream_tokens() const override { return supply_->tokens_read(); }
  std::string data_format() const override { return supply_->format(); }
  std::int64_t expected_windows() const override { return spec_.max_windows; }
  nlohmann::json facts() const override {
    nlohmann::json j = facts_;
    j["supply"] = supply_->facts();
    j["ppl_weighting"] = "per scored token (Hugging Face's example averages per-window means)";
    return j;
  }

 private:
  std::unique_ptr<TokenSupply> supply_;
  ProtocolSpec spec_;
  nlohmann::json facts_;
  std::vector<std::int32_t> buffer_;  // stream tokens [buffer_start_, buffer_start_ + size)
  std::int64_t buffer_start_ = 0, begin_ = 0, prev_end_ = 0, next_index_ = 0;
  bool exhausted_ = false, done_ = false;
};

class LlamaCppSource : public WindowSource {
 public:
  LlamaCppSource(std::unique_ptr<TokenSupply> supply, std::optional<std::int32_t> separator, std::optional<std::int32_t> bos,
                 ProtocolSpec spec)
      : spec_(spec), separator_(separator), bos_(bos) {
    ProtocolSpec chunks = spec;
    chunks.name = "llamacpp";
    chunks.bos_per_window = false;
    chunks.bos_per_window_auto = false;
    chunks.sample_seed.reset();
    chunks_ = std::make_unique<WindowStream>(std::move(supply), separator, std::nullopt, chunks);
  }
  std::optional<Window> next() override {
    std::optional<Window> w = chunks_->next();
    if (!w) {
      // llama-perplexity refuses fewer than 2 * n_ctx tokens.
      QEVAL_CHECK(seen_ >= 2 || (spec_.max_windows > 0 && seen_ >= spec_.max_windows),
                  "protocol llamacpp: {} tokens give {} chunk(s) of n_ctx {}; llama.cpp needs at least 2 * n_ctx = {} "
                  "tokens",
                  chunks_->stream_tokens(), seen_, spec_.seq_len, 2 * spec_.seq_len);
      return w;
    }
    ++seen_;
    if (bos_) w->tokens[0] = *bos_;  // "add BOS token for the first batch of each chunk"
    // llama.cpp scores logits first .. n_ctx − 2 (first = n_ctx / 2), i.e. targets first + 1 .. n_ctx − 1.
    w->first_scored = spec_.seq_len / 2 + 1;
    return w;
  }
  std::int64_t documents_read() const override { return chunks_->documents_read(); }
  std::int64_t stream_tokens() const override { return chunks_->stream_tokens(); }
  std::string data_format() const override { return chunks_->data_format(); }
  std::int64_t expected_windows() const override { return spec_.max_windows; }
  nlohmann::json facts() const override {
    nlohmann::json j = chunks_->facts();
    j["separator_id"] = id_json(separator_);
    j["bos_id"] = id_json(bos_);
    j["first_scored"] = spec_.seq_len / 2 + 1;
    j["scored_per_chunk"] = spec_.seq_len - spec_.seq_len / 2 - 1;
    return j;
  }

 private:
  ProtocolSpec spec_;
  std::optional<std::int32_t> separator_, bos_;
  std::unique_ptr<WindowStream> chunks_;
  std::int64_t seen_ = 0;
};

}  // namespace

std::unique_ptr<WindowSource> make_stride_source(std::unique_ptr<TokenSupply> supply, ProtocolSpec spec,
                                                 nlohmann::json facts) {
  return std::make_unique<StrideSource>(std::move(supply), std::move(spec), std::move(facts));
}

std::unique_ptr<WindowSource> make_llamacpp_source(std::unique_ptr<TokenSupply> supply, std::optional<std::int32_t> separator,
                                                   std::optional<std::int32_t> bos, ProtocolSpec spec) {
  return std::make_unique<LlamaCppSource>(std::move(supply), separator, bos, std::move(spec));
}

}  // namespace qeval

#include "loaders/protocol.h"

#include <algorithm>
#include <random>

#include "common/error.h"

namespace qeval {

std::string to_string(Separator s) {
  switch (s) {
    case Separator::auto_: return "auto";
    case Separator::eos: return "eos";
    case Separator::bos: return "bos";
    case Separator::none: return "none";
  }
  return "?";
}

Separator parse_separator(const std::string& s) {
  if (s == "auto") return Separator::auto_;
  if (s == "eos") return Separator::eos;
  if (s == "bos") return Separator::bos;
  if (s == "none") return Separator::none;
  fail("unknown separator '{}': expected one of auto, eos, bos, none", s);
}

nlohmann::json ProtocolSpec::to_json() const {
  nlohmann::json j = {{"name", name},
                      {"seq_len", seq_len},
                      {"bos_per_window", bos_per_window},
                      {"max_windows", max_windows},
                      {"separator", to_string(separator)}};
  j["sample_seed"] = sample_seed ? nlohmann::json(*sample_seed) : nlohmann::json(nullptr);
  return j;
}

ProtocolSpec ProtocolSpec::from_json(const nlohmann::json& j, const std::string& source) {
  ProtocolSpec p;
  try {
    p.name = j.value("name", p.name);
    p.seq_len = j.value("seq_len", p.seq_len);
    p.bos_per_window = j.value("bos_per_window", p.bos_per_window);
    p.max_windows = j.value("max_windows", p.max_windows);
    p.separator = parse_separator(j.value("separator", std::string("auto")));
    if (j.contains("sample_seed") && !j["sample_seed"].is_null()) p.sample_seed = j["sample_seed"].get<std::uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid protocol: {}", source, e.what());
  }
  QEVAL_CHECK(p.name == "windows", "{}: unknown protocol '{}': expected windows", source, p.name);
  QEVAL_CHECK(p.seq_len >= 2, "{}: seq_len must be at least 2, found {}", source, p.seq_len);
  QEVAL_CHECK(p.max_windows >= 0, "{}: max_windows must be >= 0, found {}", source, p.max_windows);
  return p;
}

WindowStream::WindowStream(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer, ProtocolSpec spec)
    : documents_(std::move(documents)), tokenizer_(tokenizer), spec_(std::move(spec)) {
  QEVAL_CHECK(spec_.seq_len >= 2, "protocol windows: seq_len must be at least 2, found {}", spec_.seq_len);
  switch (spec_.separator) {
    case Separator::auto_: separator_ = tokenizer_.document_separator(); break;
    case Separator::eos:
      separator_ = tokenizer_.eos_id();
      QEVAL_CHECK(separator_.has_value(), "protocol windows: separator eos requested but the {} tokenizer has no EOS",
                  tokenizer_.kind());
      break;
    case Separator::bos:
      separator_ = tokenizer_.bos_id();
      QEVAL_CHECK(separator_.has_value(), "protocol windows: separator bos requested but the {} tokenizer has no BOS",
                  tokenizer_.kind());
      break;
    case Separator::none: break;
  }
  if (spec_.bos_per_window)
    QEVAL_CHECK(tokenizer_.bos_id().has_value(), "protocol windows: bos_per_window needs a BOS token; the {} tokenizer has none",
                tokenizer_.kind());
}

bool WindowStream::refill() {
  // Drop consumed tokens, then append documents until one window's worth is pending.
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(pending_pos_));
  pending_pos_ = 0;
  const std::size_t need = static_cast<std::size_t>(spec_.seq_len - (spec_.bos_per_window ? 1 : 0));
  while (pending_.size() < need && !exhausted_) {
    std::optional<std::string> doc = documents_->next();
    if (!doc) {
      exhausted_ = true;
      break;
    }
    ++documents_read_;
    // The separator opens each document (llama2.c: BOS + story; GPT-2: <|endoftext|> between texts).
    if (separator_) pending_.push_back(*separator_);
    std::vector<std::int32_t> ids = tokenizer_.encode(*doc);
    pending_.insert(pending_.end(), ids.begin(), ids.end());
    stream_tokens_ += static_cast<std::int64_t>(ids.size()) + (separator_ ? 1 : 0);
  }
  return pending_.size() >= need;
}

std::optional<Window> WindowStream::next_sequential() {
  if (!refill()) return std::nullopt;
  Window w;
  w.index = next_index_++;
  const std::size_t take = static_cast<std::size_t>(spec_.seq_len - (spec_.bos_per_window ? 1 : 0));
  if (spec_.bos_per_window) w.tokens.push_back(*tokenizer_.bos_id());
  w.tokens.insert(w.tokens.end(), pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(take));
  pending_pos_ = take;
  w.first_scored = 1;
  return w;
}

std::optional<Window> WindowStream::next() {
  if (spec_.max_windows == 0) return next_sequential();
  if (!spec_.sample_seed) {
    if (next_index_ >= spec_.max_windows) return std::nullopt;
    return next_sequential();
  }
  if (!sampled_) {
    // Reservoir sampling (Algorithm R): every window equally likely, one pass, bounded memory.
    sampled_.emplace();
    std::mt19937_64 rng(*spec_.sample_seed);
    const auto k = static_cast<std::size_t>(spec_.max_windows);
    while (auto w = next_sequential()) {
      if (sampled_->size() < k) {
        sampled_->push_back(std::move(*w));
        continue;
      }
      std::uniform_int_distribution<std::int64_t> pick(0, w->index);
      std::int64_t j = pick(rng);
      if (j < static_cast<std::int64_t>(k)) (*sampled_)[static_cast<std::size_t>(j)] = std::move(*w);
    }
    std::sort(sampled_->begin(), sampled_->end(), [](const Window& a, const Window& b) { return a.index < b.index; });
  }
  if (sampled_pos_ >= sampled_->size()) return std::nullopt;
  return std::move((*sampled_)[sampled_pos_++]);
}

}  // namespace qeval

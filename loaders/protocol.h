// Evaluation protocols: how a stream of documents becomes scored windows (DESIGN.md §4).
//
// `windows`: documents are tokenised one at a time and joined with a separator token into one
// token stream, which is cut into non-overlapping windows of seq_len tokens (a final partial
// window is dropped). Every token after the first in a window is scored. With bos_per_window,
// each window is BOS followed by seq_len − 1 stream tokens (all of them scored). With
// max_windows and no seed, the first max_windows windows are used; with a seed, max_windows
// windows are drawn uniformly without replacement (reservoir sampling, std::mt19937_64) and
// evaluated in stream order. Windows keep their index in the full stream, so shards and
// resumed runs can be merged in a fixed order.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loaders/documents.h"
#include "loaders/tokenizer.h"

namespace qeval {

enum class Separator { auto_, eos, bos, none };  // auto: the tokenizer's document_separator()

struct ProtocolSpec {
  std::string name = "windows";
  std::int64_t seq_len = 512;
  bool bos_per_window = false;
  std::int64_t max_windows = 0;             // 0: every window
  std::optional<std::uint64_t> sample_seed; // with max_windows: sample instead of taking the first
  Separator separator = Separator::auto_;

  nlohmann::json to_json() const;
  static ProtocolSpec from_json(const nlohmann::json& j, const std::string& source);
};

std::string to_string(Separator s);
Separator parse_separator(const std::string& s);  // throws with the valid names

struct Window {
  std::int64_t index = 0;             // position of the window in the full stream
  std::vector<std::int32_t> tokens;   // seq_len tokens
  std::int64_t first_scored = 1;      // targets tokens[first_scored..] are scored (predicted from their prefix)
  std::int64_t scored() const { return static_cast<std::int64_t>(tokens.size()) - first_scored; }
};

// Streams the windows of one data file. Memory: one document plus one window (or, when
// sampling, the max_windows sampled windows).
class WindowStream {
 public:
  WindowStream(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer, ProtocolSpec spec);
  std::optional<Window> next();
  std::int64_t documents_read() const { return documents_read_; }
  std::int64_t stream_tokens() const { return stream_tokens_; }  // tokens produced so far (incl. separators)
  // The separator token actually used (nullopt: none).
  std::optional<std::int32_t> separator_id() const { return separator_; }

 private:
  std::optional<Window> next_sequential();
  bool refill();

  std::unique_ptr<DocumentReader> documents_;
  const Tokenizer& tokenizer_;
  ProtocolSpec spec_;
  std::optional<std::int32_t> separator_;
  std::vector<std::int32_t> pending_;  // tokens not yet in a window
  std::size_t pending_pos_ = 0;
  std::int64_t next_index_ = 0;
  std::int64_t documents_read_ = 0;
  std::int64_t stream_tokens_ = 0;
  bool exhausted_ = false;
  std::optional<std::vector<Window>> sampled_;  // filled on first next() when sampling
  std::size_t sampled_pos_ = 0;
};

}  // namespace qeval

// Evaluation protocols: how a data file becomes scored windows (DESIGN.md §4). Every protocol
// is a WindowSource, so the evaluator does not care which one made the windows; each is named,
// stored in configs/protocols/<name>.json, and recorded with all its parameters.
//
// The token stream. Text data: documents are tokenised one at a time (no BOS/EOS added by the
// tokenizer) and the separator token opens each document (windows/stride: the tokenizer's
// document_separator() by default). Pre-tokenised `.bin` data (loaders/text/token_file.h): the file's
// tokens as they are, no separators.
//
// `windows`: the stream cut into non-overlapping windows of seq_len (a final partial window is
//   dropped); every token after the first is scored. bos_per_window "auto" (the preset) is true
//   for GGUF tokenizers with tokenizer.ggml.add_bos_token true, false otherwise (Tokenizer::
//   bos_per_window_by_default); records hold the resolved value. With bos_per_window, each window is BOS +
//   seq_len − 1 stream tokens, all scored. With max_windows and no seed, the first max_windows;
//   with a seed, max_windows drawn uniformly without replacement (reservoir sampling,
//   std::mt19937_64), in stream order.
// `stride`: Hugging Face's sliding window ("Perplexity of fixed-length models"): for begin in
//   range(0, N, stride): end = min(begin + seq_len, N); the window is tokens[begin, end) and only
//   its last end − prev_end tokens are scored (never its first token); stop when end == N. The
//   last window may be shorter (the evaluator batches only equal lengths). A final window of one
//   token (nothing to score; HF would give NaN) is skipped. qeval's PPL weights every scored
//   token equally; HF's example averages the per-window means, which differs when the last
//   window is short. With stride == seq_len it is `windows` plus the final partial window.
// `llamacpp`: llama.cpp's perplexity tool: the stream cut into chunks of n_ctx = seq_len (the
//   remainder dropped; max_windows = --chunks), the first token of each chunk replaced by BOS
//   when BOS is added, and only targets n_ctx/2 + 1 .. n_ctx − 1 scored: n_ctx/2 − 1 per chunk.
//   llama.cpp tokenises the whole file once with BOS first; with text_split "file" (its preset)
//   and separator auto (BOS when BOS is added, else none) the stream is exactly that.
// `gptq-c4`: GPTQ's C4 evaluation windows (IST-DASLab/gptq datautils.py get_c4): Python
//   random.seed(seed); for each of max_windows samples, draw documents with randint(0, D − 1)
//   until one has >= seq_len tokens, then i = randint(0, len − seq_len − 1), window =
//   ids[i, i + seq_len); every token after the first scored (GPTQ's eval shifts by one). The
//   ids are what HF's tokenizer(text) gives: BOS first for Llama-style tokenizers (bos auto),
//   nothing added for GPT-2. All document texts are read into memory once (so they can be
//   drawn by index; C4's validation shard 0 is ~40 MB of text); only drawn documents are
//   tokenised. A document of exactly seq_len tokens makes GPTQ's randint(0, −1) raise; qeval
//   then takes the whole document without a second draw (as later forks of the code do) and
//   counts it. Windows keep their sample number as index.
//
// Windows keep their index (position in the protocol's full sequence of windows), so shards and
// resumed runs can be merged in a fixed order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loaders/text/documents.h"
#include "loaders/text/token_file.h"
#include "loaders/tokenizers/tokenizer.h"

namespace qeval {

enum class Separator { auto_, eos, bos, none };  // auto: the protocol's default (see above)
enum class BosMode { auto_, yes, no };           // auto: yes for Llama-style tokenizers, no for GPT-2 BPE

struct ProtocolSpec {
  std::string name = "windows";             // windows | stride | llamacpp | gptq-c4
  std::int64_t seq_len = 512;               // window length (llamacpp: n_ctx; gptq-c4: seqlen)
  std::int64_t stride = 0;                  // stride: tokens a window advances (0: seq_len / 2)
  bool bos_per_window = false;              // windows
  // windows, "auto" (the preset's): resolve_bos_per_window() sets bos_per_window from the
  // tokenizer (Tokenizer::bos_per_window_by_default: GGUF with add_bos_token true) before use.
  bool bos_per_window_auto = false;
  std::int64_t max_windows = 0;             // 0: all (gptq-c4: the number of samples, 256)
  std::optional<std::uint64_t> sample_seed; // windows: sample max_windows; gptq-c4: Python seed (0)
  Separator separator = Separator::auto_;   // windows, stride, llamacpp
  BosMode bos = BosMode::auto_;             // llamacpp, gptq-c4
  std::optional<TextSplit> text_split;      // replaces DocumentOptions::text_split when set

  // The parameters that apply to `name`, every one written out.
  nlohmann::json to_json() const;
  // Starts from defaults_for(name); unknown keys and keys that do not apply are errors naming
  // `source` ("description" is allowed and ignored).
  static ProtocolSpec from_json(const nlohmann::json& j, const std::string& source);
  static ProtocolSpec defaults_for(const std::string& name);  // throws with the valid names
  // bos_per_window "auto" decided: tokenizer->bos_per_window_by_default() (false without a
  // tokenizer); a no-op when bos_per_window was given. Returns *this.
  ProtocolSpec& resolve_bos_per_window(const Tokenizer* tokenizer);
};

std::vector<std::string> protocol_names();  // the presets, as in configs/protocols/
// The preset (configs/protocols/<name>.json, compiled in) or a JSON file with a protocol.
ProtocolSpec load_protocol(const std::string& name_or_path);
const std::string& protocol_preset_json(const std::string& name);

// Protocol `windows`: the stream tokens that window `index` holds, [first, end). A window takes
// seq_len stream tokens, or seq_len − 1 after its BOS (bos_per_window, resolved); so windows of
// two lengths over one stream can be told apart (calibration windows against evaluated ones).
struct StreamRange {
  std::int64_t first = 0, end = 0;
  bool overlaps(const StreamRange& o) const { return first < o.end && o.first < end; }
};
StreamRange windows_stream_range(const ProtocolSpec& windows, std::int64_t index);
// Of `ranges` (disjoint, in stream order), the first that `r` overlaps, or ranges.end().
std::vector<StreamRange>::const_iterator first_overlap(const std::vector<StreamRange>& ranges, const StreamRange& r);

std::string to_string(Separator s);
Separator parse_separator(const std::string& s);  // throws with the valid names
std::string to_string(BosMode b);
BosMode parse_bos_mode(const std::string& s);

struct Window {
  std::int64_t index = 0;             // position of the window in the protocol's full sequence
  std::vector<std::int32_t> tokens;   // seq_len tokens (stride: the last window may be shorter)
  std::int64_t first_scored = 1;      // targets tokens[first_scored..] are scored (predicted from their prefix)
  std::int64_t scored() const { return static_cast<std::int64_t>(tokens.size()) - first_scored; }
};

class WindowSource {
 public:
  virtual ~WindowSource() = default;
  virtual std::optional<Window> next() = 0;
  virtual std::int64_t documents_read() const = 0;
  virtual std::int64_t stream_tokens() const = 0;  // tokens produced so far (incl. separators)
  // What the data was read as: the document reader's format ("text", "jsonl.gz", ...) or "tokens-uint16" / "tokens-uint32".
  virtual std::string data_format() const = 0;
  // Windows the source will give when known in advance (gptq-c4, limits), else 0.
  virtual std::int64_t expected_windows() const { return 0; }
  // What the record should say beyond the spec: resolved separator / BOS ids, exactness,
  // token file dtype... Complete once next() has returned nullopt.
  virtual nlohmann::json facts() const = 0;
};

// Windows already in memory, given in the order held (calibration windows, HellaSwag's endings).
class WindowList final : public WindowSource {
 public:
  WindowList(std::vector<Window> windows, std::string format) : windows_(std::move(windows)), format_(std::move(format)) {}
  std::optional<Window> next() override {
    if (next_ == windows_.size()) return std::nullopt;
    return windows_[next_++];
  }
  std::int64_t documents_read() const override { return 0; }
  std::int64_t stream_tokens() const override { return 0; }
  std::string data_format() const override { return format_; }
  std::int64_t expected_windows() const override { return static_cast<std::int64_t>(windows_.size()); }
  nlohmann::json facts() const override { return nlohmann::json::object(); }

 private:
  std::vector<Window> windows_;
  std::string format_;
  std::size_t next_ = 0;
};

// Where the tokens of a window source come from (loaders/protocols/protocol_internal.h implements them).
class TokenSupply;

// Streams the windows of protocol `windows`. Memory: one document plus one window (or, when
// sampling, the max_windows sampled windows).
class WindowStream : public WindowSource {
 public:
  WindowStream(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer, ProtocolSpec spec);
  // From any token supply; `bos` is needed only with bos_per_window.
  WindowStream(std::unique_ptr<TokenSupply> supply, std::optional<std::int32_t> separator, std::optional<std::int32_t> bos,
               ProtocolSpec spec);
  ~WindowStream() override;
  std::optional<Window> next() override;
  std::int64_t documents_read() const override;
  std::int64_t stream_tokens() const override;
  std::string data_format() const override;
  std::int64_t expected_windows() const override;
  nlohmann::json facts() const override;
  // The separator token actually used (nullopt: none).
  std::optional<std::int32_t> separator_id() const { return separator_; }

 private:
  std::optional<Window> next_sequential();
  bool refill();

  std::unique_ptr<TokenSupply> supply_;
  ProtocolSpec spec_;
  std::optional<std::int32_t> separator_, bos_;
  std::vector<std::int32_t> pending_;  // tokens not yet in a window
  std::size_t pending_pos_ = 0;
  std::int64_t next_index_ = 0;
  bool exhausted_ = false;
  std::optional<std::vector<Window>> sampled_;  // filled on first next() when sampling
  std::size_t sampled_pos_ = 0;
};

struct WindowSourceOptions {
  DocumentOptions documents;                   // text data (text_split replaced by the protocol's when set)
  TokenDtype token_dtype = TokenDtype::auto_;  // pre-tokenised .bin data
  std::int64_t vocab_size = 0;                 // .bin data: ids must be below it (the model's vocabulary; 0: tokenizer's)
};

// True when `data` is read as pre-tokenised tokens (a `.bin` file) rather than text.
bool is_token_file(const std::filesystem::path& data);

// Opens `data` (text or pre-tokenised .bin) under protocol `spec`. `tokenizer` may be null only
// for token files (then there is no BOS, separator or tokenizer-dependent default).
std::unique_ptr<WindowSource> open_window_source(const std::filesystem::path& data, const Tokenizer* tokenizer,
                                                 const ProtocolSpec& spec, const WindowSourceOptions& options = {});
// From documents already open (tests, other readers).
std::unique_ptr<WindowSource> make_window_source(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer,
                                                 const ProtocolSpec& spec, const std::string& source_name = "documents");

}  // namespace qeval

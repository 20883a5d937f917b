// Protocol specs (JSON, presets), the shared token supply from documents, protocol `windows`,
// and the factory that opens a data file under any protocol.
#include "loaders/protocols/protocol.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/json_integer.h"
#include "loaders/protocols/protocol_internal.h"

namespace qeval {

namespace {

const std::vector<std::string>& names() {
  static const std::vector<std::string> n = {"windows", "stride", "llamacpp", "gptq-c4"};
  return n;
}

// The keys each protocol takes (besides "name").
std::set<std::string> keys_for(const std::string& name) {
  if (name == "windows") return {"seq_len", "bos_per_window", "max_windows", "sample_seed", "separator", "text_split"};
  if (name == "stride") return {"seq_len", "stride", "max_windows", "separator", "text_split"};
  if (name == "llamacpp") return {"seq_len", "max_windows", "separator", "bos", "text_split"};
  return {"seq_len", "max_windows", "sample_seed", "bos", "text_split"};  // gptq-c4
}

}  // namespace

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

std::string to_string(BosMode b) { return b == BosMode::auto_ ? "auto" : b == BosMode::yes ? "yes" : "no"; }

BosMode parse_bos_mode(const std::string& s) {
  if (s == "auto") return BosMode::auto_;
  if (s == "yes") return BosMode::yes;
  if (s == "no") return BosMode::no;
  fail("unknown bos mode '{}': expected one of auto, yes, no", s);
}

std::vector<std::string> protocol_names() { return names(); }

ProtocolSpec ProtocolSpec::defaults_for(const std::string& name) {
  ProtocolSpec p;
  p.name = name;
  if (name == "windows") {
    p.bos_per_window_auto = true;
    return p;
  }
  if (name == "stride") {
    // Hugging Face's example: GPT-2's 1024 positions, stride 512, one joined text.
    p.seq_len = 1024;
    p.stride = 512;
    p.text_split = TextSplit::file;
    return p;
  }
  if (name == "llamacpp") {
    p.seq_len = 512;  // llama-perplexity's default -c
    p.text_split = TextSplit::file;
    return p;
  }
  if (name == "gptq-c4") {
    p.seq_len = 2048;
    p.max_windows = 256;
    p.sample_seed = 0;
    return p;
  }
  fail("unknown protocol '{}': expected one of {}", name, fmt::join(names(), ", "));
}

StreamRange windows_stream_range(const ProtocolSpec& windows, std::int64_t index) {
  QEVAL_CHECK(windows.name == "windows" && !windows.bos_per_window_auto,
              "windows_stream_range: needs the windows protocol with bos_per_window decided, found {}", windows.name);
  const std::int64_t take = windows.seq_len - (windows.bos_per_window ? 1 : 0);  // as WindowStream::next
  return {index * take, (index + 1) * take};
}

std::vector<StreamRange>::const_iterator first_overlap(const std::vector<StreamRange>& ranges, const StreamRange& r) {
  // The first range that ends after r begins; r overlaps it iff it begins before r ends.
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), r.first,
                                   [](std::int64_t first, const StreamRange& e) { return first < e.end; });
  return it != ranges.end() && it->first < r.end ? it : ranges.end();
}

ProtocolSpec& ProtocolSpec::resolve_bos_per_window(const Tokenizer* tokenizer) {
  if (bos_per_window_auto) bos_per_window = tokenizer != nullptr && tokenizer->bos_per_window_by_default();
  bos_per_window_auto = false;
  return *this;
}

nlohmann::json ProtocolSpec::to_json() const {
  nlohmann::json all = {{"seq_len", seq_len},
                        {"stride", stride},
                        {"bos_per_window", bos_per_window_auto ? nlohmann::json("auto") : nlohmann::json(bos_per_window)},
                        {"max_windows", max_windows},
                        {"separator", to_string(separator)},
                        {"bos", to_string(bos)}};
  all["sample_seed"] = sample_seed ? nlohmann::json(*sample_seed) : nlohmann::json(nullptr);
  all["text_split"] = text_split ? nlohmann::json(to_string(*text_split)) : nlohmann::json(nullptr);
  nlohmann::json j = {{"name", name}};
  for (const auto& key : keys_for(name)) j[key] = all[key];
  return j;
}

ProtocolSpec ProtocolSpec::from_json(const nlohmann::json& j, const std::string& source) {
  QEVAL_CHECK(j.is_object(), "{}: a protocol is a JSON object, found {}", source, j.type_name());
  QEVAL_CHECK(j.contains("name") && j["name"].is_string(), "{}: a protocol needs a \"name\" (one of {})", source,
              fmt::join(names(), ", "));
  const std::string name = j["name"].get<std::string>();
  QEVAL_CHECK(std::find(names().begin(), names().end(), name) != names().end(),
              "{}: unknown protocol '{}': expected one of {}", source, name, fmt::join(names(), ", "));
  ProtocolSpec p = defaults_for(name);
  const std::set<std::string> keys = keys_for(name);
  for (const auto& [key, value] : j.items())
    QEVAL_CHECK(key == "name" || key == "description" || keys.count(key), "{}: protocol {} has no parameter \"{}\" (it takes: {})", source, name,
                key, fmt::join(keys, ", "));
  try {
    auto integer = [&](const char* key, std::int64_t& out) {
      if (!j.contains(key)) return;
      out = json_integer(j[key], fmt::format("{}: \"{}\"", source, key));
    };
    integer("seq_len", p.seq_len);
    integer("stride", p.stride);
    integer("max_windows", p.max_windows);
    if (j.contains("bos_per_window")) {
      const nlohmann::json& b = j["bos_per_window"];
      QEVAL_CHECK(b.is_boolean() || b == "auto", "\"bos_per_window\" must be true, false or \"auto\", found {}", b.dump());
      p.bos_per_window_auto = !b.is_boolean();
      p.bos_per_window = b.is_boolean() && b.get<bool>();
    }
    if (j.contains("separator")) p.separator = parse_separator(j["separator"].get<std::string>());
    if (j.contains("bos")) p.bos = parse_bos_mode(j["bos"].get<std::string>());
    if (j.contains("sample_seed"))
      p.sample_seed = j["sample_seed"].is_null() ? std::nullopt : std::optional<std::uint64_t>(json_unsigned(j["sample_seed"], fmt::format("{}: \"sample_seed\"", source)));
    if (j.contains("text_split"))
      p.text_split = j["text_split"].is_null() ? std::nullopt
                                               : std::optional<TextSplit>(parse_text_split(j["text_split"].get<std::string>()));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid protocol {}: {}", source, name, e.what());
  } catch (const Error& e) {
    fail("{}: invalid protocol {}: {}", source, name, e.what());
  }
  QEVAL_CHECK(p.seq_len >= 2, "{}: seq_len must be at least 2, found {}", source, p.seq_len);
  QEVAL_CHECK(p.max_windows >= 0, "{}: max_windows must be >= 0, found {}", source, p.max_windows);
  if (name == "stride") {
    if (p.stride == 0) p.stride = p.seq_len / 2;
    QEVAL_CHECK(p.stride >= 1, "{}: stride must be >= 1, found {}", source, p.stride);
    // A window scores the tokens its stride moved past; beyond seq_len the tokens between two
    // windows would be scored by neither (issue 51: silently left out).
    QEVAL_CHECK(p.stride <= p.seq_len, "{}: stride {} is above seq_len {}: the {} tokens between two windows would be "
                "scored by none; give a stride of at most {}", source, p.stride, p.seq_len, p.stride - p.seq_len, p.seq_len);
  }
  if (name == "llamacpp")
    QEVAL_CHECK(p.seq_len >= 4, "{}: llamacpp needs n_ctx (seq_len) >= 4 to score anything, found {}", source, p.seq_len);
  if (name == "gptq-c4") {
    QEVAL_CHECK(p.max_windows >= 1, "{}: gptq-c4 needs max_windows (the number of samples) >= 1", source);
    if (!p.sample_seed) p.sample_seed = 0;
  }
  return p;
}

const std::string& protocol_preset_json(const std::string& name) {
  static std::map<std::string, std::string> texts;
  auto it = texts.find(name);
  if (it == texts.end()) it = texts.emplace(name, ProtocolSpec::defaults_for(name).to_json().dump(2) + "\n").first;
  return it->second;
}

ProtocolSpec load_protocol(const std::string& name_or_path) {
  if (std::find(names().begin(), names().end(), name_or_path) != names().end())
    return ProtocolSpec::defaults_for(name_or_path);
  const std::filesystem::path path(name_or_path);
  QEVAL_CHECK(std::filesystem::is_regular_file(path),
              "unknown protocol '{}': neither a preset ({}) nor a JSON protocol file", name_or_path,
              fmt::join(names(), ", "));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", path.string(), e.what());
  }
  return ProtocolSpec::from_json(j, path.string());
}

nlohmann::json id_json(std::optional<std::int32_t> id) { return id ? nlohmann::json(*id) : nlohmann::json(nullptr); }

std::optional<std::int32_t> resolve_separator(Separator s, const Tokenizer* tokenizer, std::optional<std::int32_t> fallback,
                                              const std::string& protocol) {
  if (s == Separator::auto_ || s == Separator::none) return s == Separator::none ? std::nullopt : fallback;
  QEVAL_CHECK(tokenizer, "protocol {}: separator {} needs a tokenizer to name the token", protocol, to_string(s));
  auto id = s == Separator::eos ? tokenizer->eos_id() : tokenizer->bos_id();
  QEVAL_CHECK(id.has_value(), "protocol {}: separator {} requested but the {} tokenizer has none", protocol, to_string(s),
              tokenizer->kind());
  return id;
}

std::optional<std::int32_t> resolve_bos(BosMode b, const Tokenizer* tokenizer, const std::string& protocol) {
  if (b == BosMode::no) return std::nullopt;
  if (b == BosMode::auto_) {
    if (!tokenizer || !tokenizer->adds_bos()) return std::nullopt;  // the tokenizer's own convention (GPT-2 BPE: none)
    return tokenizer->bos_id();
  }
  QEVAL_CHECK(tokenizer && tokenizer->bos_id(), "protocol {}: bos yes needs a tokenizer with a BOS token{}", protocol,
              tokenizer ? fmt::format("; the {} tokenizer has none", tokenizer->kind()) : std::string());
  return tokenizer->bos_id();
}

namespace {

// Documents tokenised piece by piece: a document longer than kPieceBytes is encoded in pieces cut
// where the tokenizer says the encoding is exact (Tokenizer::continuation_cut), one piece per
// append(), so a window costs the memory of a piece (the tokenizer's working memory is ~100 bytes
// per byte of text) and not of the document. Where a tokenizer knows no exact cut within a piece
// (a run of 256 KiB without a space, a tokenizer with no cut rule), the piece ends at a character
// boundary instead: the tokens at that seam may differ from encoding the document whole, and
// facts() counts such cuts ("inexact_cuts") so the record says so.
class DocumentTokens : public TokenSupply {
 public:
  static constexpr std::size_t kPieceBytes = std::size_t{256} << 10;

  DocumentTokens(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer, std::optional<std::int32_t> sep)
      : documents_(std::move(documents)), tokenizer_(tokenizer), separator_(sep) {}
  bool append(std::vector<std::int32_t>& out) override {
    if (!document_) {
      document_ = documents_->next();
      if (!document_) return false;
      ++documents_read_;
      offset_ = 0;
      // The separator opens each document (llama2.c: BOS + story; GPT-2: <|endoftext|> between texts).
      if (separator_) {
        out.push_back(*separator_);
        ++tokens_read_;
      }
    }
    const std::string_view rest = std::string_view(*document_).substr(offset_);
    std::size_t take = rest.size();
    if (rest.size() > kPieceBytes) {
      take = tokenizer_.continuation_cut(rest, kPieceBytes);
      if (take == 0) {
        take = kPieceBytes;  // no exact cut: a character boundary (never inside a UTF-8 sequence)
        while (take > 1 && (static_cast<unsigned char>(rest[take]) & 0xC0) == 0x80) --take;
        ++inexact_cuts_;
      }
    }
    const std::string_view piece = rest.substr(0, take);
    std::vector<std::int32_t> ids = offset_ == 0 ? tokenizer_.encode(piece) : tokenizer_.encode_continuation(piece);
    out.insert(out.end(), ids.begin(), ids.end());
    tokens_read_ += static_cast<std::int64_t>(ids.size());
    offset_ += take;
    if (offset_ >= document_->size()) document_.reset();
    return true;
  }
  std::int64_t documents_read() const override { return documents_read_; }
  std::int64_t tokens_read() const override { return tokens_read_; }
  nlohmann::json facts() const override {
    nlohmann::json j = {{"source", documents_->format()}, {"tokenizer", tokenizer_.kind()}};
    if (inexact_cuts_ > 0)
      j["inexact_cuts"] = fmt::format(
          "{} cuts inside documents longer than {} bytes fell where the tokenizer knows no exact cut; tokens at those "
          "seams may differ from encoding the documents whole",
          inexact_cuts_, kPieceBytes);
    return j;
  }
  std::string format() const override { return documents_->format(); }

 private:
  std::unique_ptr<DocumentReader> documents_;
  const Tokenizer& tokenizer_;
  std::optional<std::int32_t> separator_;
  std::optional<std::string> document_;  // the document being encoded, from offset_ on
  std::size_t offset_ = 0;
  std::int64_t documents_read_ = 0, tokens_read_ = 0, inexact_cuts_ = 0;
};

}  // namespace

std::unique_ptr<TokenSupply> document_token_supply(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer,
                                                   std::optional<std::int32_t> separator) {
  return std::make_unique<DocumentTokens>(std::move(documents), tokenizer, separator);
}

// ---- windows

WindowStream::WindowStream(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer, ProtocolSpec spec)
    : spec_(std::move(spec.resolve_bos_per_window(&tokenizer))) {
  separator_ = resolve_separator(spec_.separator, &tokenizer, tokenizer.document_separator(), "windows");
  if (spec_.bos_per_window) {
    bos_ = tokenizer.bos_id();
    QEVAL_CHECK(bos_.has_value(), "protocol windows: bos_per_window needs a BOS token; the {} tokenizer has none",
                tokenizer.kind());
  }
  supply_ = document_token_supply(std::move(documents), tokenizer, separator_);
  QEVAL_CHECK(spec_.seq_len >= 2, "protocol windows: seq_len must be at least 2, found {}", spec_.seq_len);
}

WindowStream::WindowStream(std::unique_ptr<TokenSupply> supply, std::optional<std::int32_t> separator,
                           std::optional<std::int32_t> bos, ProtocolSpec spec)
    : supply_(std::move(supply)), spec_(std::move(spec.resolve_bos_per_window(nullptr))), separator_(separator), bos_(bos) {
  QEVAL_CHECK(spec_.seq_len >= 2, "protocol {}: seq_len must be at least 2, found {}", spec_.name, spec_.seq_len);
  QEVAL_CHECK(!spec_.bos_per_window || bos_.has_value(), "protocol {}: bos_per_window needs a BOS token (give a tokenizer)",
              spec_.name);
}

WindowStream::~WindowStream() = default;

std::int64_t WindowStream::documents_read() const { return supply_->documents_read(); }
std::int64_t WindowStream::stream_tokens() const { return supply_->tokens_read(); }
std::int64_t WindowStream::expected_windows() const { return spec_.max_windows; }
std::string WindowStream::data_format() const { return supply_->format(); }

nlohmann::json WindowStream::facts() const {
  nlohmann::json j = {{"separator_id", id_json(separator_)}, {"supply", supply_->facts()}};
  if (spec_.bos_per_window) j["bos_id"] = id_json(bos_);
  return j;
}

bool WindowStream::refill() {
  // Drop consumed tokens, then append until one window's worth is pending.
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(pending_pos_));
  pending_pos_ = 0;
  const std::size_t need = static_cast<std::size_t>(spec_.seq_len - (spec_.bos_per_window ? 1 : 0));
  while (pending_.size() < need && !exhausted_)
    if (!supply_->append(pending_)) exhausted_ = true;
  return pending_.size() >= need;
}

std::optional<Window> WindowStream::next_sequential() {
  if (!refill()) return std::nullopt;
  Window w;
  w.index = next_index_++;
  const std::size_t take = static_cast<std::size_t>(spec_.seq_len - (spec_.bos_per_window ? 1 : 0));
  if (spec_.bos_per_window) w.tokens.push_back(*bos_);
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

// ---- factory

bool is_token_file(const std::filesystem::path& data) {
  std::string ext = data.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".bin";
}

namespace {

std::unique_ptr<WindowSource> from_supply(std::unique_ptr<TokenSupply> supply, const Tokenizer* tokenizer,
                                          ProtocolSpec spec) {
  spec.resolve_bos_per_window(tokenizer);
  std::optional<std::int32_t> doc_sep = tokenizer ? tokenizer->document_separator() : std::nullopt;
  if (spec.name == "windows") {
    auto sep = resolve_separator(spec.separator, tokenizer, doc_sep, spec.name);
    std::optional<std::int32_t> bos;
    if (spec.bos_per_window) bos = resolve_bos(BosMode::yes, tokenizer, spec.name);
    return std::make_unique<WindowStream>(std::move(supply), sep, bos, spec);
  }
  if (spec.name == "stride") {
    auto sep = resolve_separator(spec.separator, tokenizer, doc_sep, spec.name);
    return make_stride_source(std::move(supply), spec, {{"separator_id", id_json(sep)}});
  }
  if (spec.name == "llamacpp") {
    auto bos = resolve_bos(spec.bos, tokenizer, spec.name);
    // llama.cpp tokenises the text once with BOS first (when it adds BOS) and nothing else.
    auto sep = resolve_separator(spec.separator, tokenizer, bos, spec.name);
    return make_llamacpp_source(std::move(supply), sep, bos, spec);
  }
  fail("protocol {}: not available for a token stream", spec.name);
}

// The separator the supply must insert, resolved the same way from_supply reads it.
std::optional<std::int32_t> supply_separator(const ProtocolSpec& spec, const Tokenizer& tokenizer) {
  if (spec.name == "llamacpp")
    return resolve_separator(spec.separator, &tokenizer, resolve_bos(spec.bos, &tokenizer, spec.name), spec.name);
  return resolve_separator(spec.separator, &tokenizer, tokenizer.document_separator(), spec.name);
}

}  // namespace

std::unique_ptr<WindowSource> make_window_source(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer,
                                                 const ProtocolSpec& spec, const std::string& source_name) {
  if (spec.name == "gptq-c4") return make_gptq_c4_source(std::move(documents), tokenizer, spec, source_name);
  if (spec.name == "windows") return std::make_unique<WindowStream>(std::move(documents), tokenizer, spec);
  auto supply = document_token_supply(std::move(documents), tokenizer, supply_separator(spec, tokenizer));
  return from_supply(std::move(supply), &tokenizer, spec);
}

std::unique_ptr<WindowSource> open_window_source(const std::filesystem::path& data, const Tokenizer* tokenizer,
                                                 const ProtocolSpec& spec, const WindowSourceOptions& options) {
  if (is_token_file(data)) {
    QEVAL_CHECK(spec.name != "gptq-c4",
                "{}: protocol gptq-c4 draws whole documents, but a pre-tokenised .bin file has no document boundaries; "
                "use a text or JSON-lines file",
                data.string());
    std::int64_t vocab = options.vocab_size > 0 ? options.vocab_size : tokenizer ? tokenizer->vocab_size() : 0;
    QEVAL_CHECK(vocab > 0, "{}: reading a token file needs the model's vocabulary size to check the ids", data.string());
    // Token files carry no separators; only an explicit separator would be inserted, and there
    // are no documents to put it between.
    ProtocolSpec s = spec;
    s.separator = Separator::none;
    return from_supply(token_file_supply(data, options.token_dtype, vocab), tokenizer, s);
  }
  QEVAL_CHECK(tokenizer, "{}: text data needs a tokenizer", data.string());
  DocumentOptions doc = options.documents;
  if (spec.text_split) doc.text_split = *spec.text_split;
  return make_window_source(open_documents(data, doc), *tokenizer, spec, data.string());
}

}  // namespace qeval

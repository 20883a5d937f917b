#include "loaders/tokenizers/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <mutex>

#include "common/error.h"
#include "loaders/tokenizers/spm_shim/spm_shim.h"

#ifndef QEVAL_SPM_SHIM_PATH
#define QEVAL_SPM_SHIM_PATH ""
#endif

namespace qeval {

namespace fs = std::filesystem;

struct SpmShim {
  std::string path;
  decltype(&qeval_spm_abi_version) abi_version;
  decltype(&qeval_spm_load) load;
  decltype(&qeval_spm_free) free;
  decltype(&qeval_spm_encode) encode;
  decltype(&qeval_spm_decode) decode;
  decltype(&qeval_spm_piece_size) piece_size;
  decltype(&qeval_spm_bos_id) bos_id;
  decltype(&qeval_spm_eos_id) eos_id;
  decltype(&qeval_spm_unk_id) unk_id;
};

namespace {

std::vector<fs::path> shim_candidates() {
  std::vector<fs::path> paths;
  if (const char* env = std::getenv("QEVAL_SPM_SHIM"); env && *env) paths.emplace_back(env);
  if (std::string(QEVAL_SPM_SHIM_PATH).size() > 0) paths.emplace_back(QEVAL_SPM_SHIM_PATH);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) paths.push_back(exe.parent_path() / "libqeval_spm_shim.so");
  return paths;
}

template <typename F>
void resolve(void* lib, const char* name, F& fn, const std::string& path) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  QEVAL_CHECK(fn != nullptr, "SentencePiece shim {} lacks the symbol {}", path, name);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// Loaded once per process and never unloaded (processors may live until exit).
const SpmShim& shim() {
  static std::mutex mutex;
  static std::unique_ptr<SpmShim> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded) return *loaded;
  // ASan kills the process on any dlopen with RTLD_DEEPBIND (google/sanitizers#611), and without
  // it the shim's protobuf would bind to LibTorch's: refuse cleanly instead.
  QEVAL_CHECK(!kAddressSanitizer,
              "SentencePiece is not available in this AddressSanitizer build: the shim must be dlopen()ed with "
              "RTLD_DEEPBIND, which ASan does not allow (use a build without QEVAL_SANITIZE, or the llama2.c "
              "tokenizer.bin export of the model)");
  std::string tried;
  for (const fs::path& candidate : shim_candidates()) {
    std::error_code ec;
    if (!fs::exists(candidate, ec)) {
      tried += "\n  " + candidate.string() + ": no such file";
      continue;
    }
    // DEEPBIND: sentencepiece resolves its bundled protobuf before LibTorch's libprotobuf;
    // LOCAL: none of its symbols become visible to the rest of the process.
    void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (lib == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + candidate.string() + ": " + (why ? why : "dlopen failed");
      continue;
    }
    auto s = std::make_unique<SpmShim>();
    s->path = candidate.string();
    resolve(lib, "qeval_spm_abi_version", s->abi_version, s->path);
    QEVAL_CHECK(s->abi_version() == QEVAL_SPM_ABI_VERSION, "SentencePiece shim {} has ABI {}, expected {}",
                s->path, s->abi_version(), QEVAL_SPM_ABI_VERSION);
    resolve(lib, "qeval_spm_load", s->load, s->path);
    resolve(lib, "qeval_spm_free", s->free, s->path);
    resolve(lib, "qeval_spm_encode", s->encode, s->path);
    resolve(lib, "qeval_spm_decode", s->decode, s->path);
    resolve(lib, "qeval_spm_piece_size", s->piece_size, s->path);
    resolve(lib, "qeval_spm_bos_id", s->bos_id, s->path);
    resolve(lib, "qeval_spm_eos_id", s->eos_id, s->path);
    resolve(lib, "qeval_spm_unk_id", s->unk_id, s->path);
    loaded = std::move(s);
    return *loaded;
  }
  fail("cannot load the SentencePiece shim libqeval_spm_shim.so (build the qeval_spm_shim target, or set "
       "QEVAL_SPM_SHIM to its path); tried:{}",
       tried);
}

}  // namespace

std::string SentencePieceTokenizer::shim_path() { return shim().path; }

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const fs::path& path) {
  std::error_code ec;
  QEVAL_CHECK(fs::is_regular_file(path, ec), "SentencePiece model {} does not exist or is not a file",
              path.string());
  auto tok = std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer());
  tok->shim_ = &shim();
  tok->source_ = path.string();
  std::array<char, 1024> err{};
  tok->handle_ = tok->shim_->load(path.c_str(), err.data(), err.size());
  QEVAL_CHECK(tok->handle_ != nullptr, "{}: not a readable SentencePiece model: {}", path.string(), err.data());
  auto* h = static_cast<qeval_spm*>(tok->handle_);
  tok->vocab_size_ = tok->shim_->piece_size(h);
  QEVAL_CHECK(tok->vocab_size_ > 0, "{}: SentencePiece model has no pieces", path.string());
  if (const int32_t bos = tok->shim_->bos_id(h); bos >= 0) tok->bos_ = bos;
  if (const int32_t eos = tok->shim_->eos_id(h); eos >= 0) tok->eos_ = eos;
  tok->choose_continuation();
  return tok;
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (handle_ != nullptr) shim_->free(static_cast<qeval_spm*>(handle_));
}

std::vector<std::int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  auto* h = static_cast<const qeval_spm*>(handle_);
  std::vector<std::int32_t> ids(text.size() + 8);
  std::array<char, 1024> err{};
  for (;;) {
    const long n = shim_->encode(h, text.data(), text.size(), ids.data(), ids.size(), err.data(), err.size());
    QEVAL_CHECK(n >= 0, "{}: SentencePiece encode of {} bytes failed: {}", source_, text.size(), err.data());
    const bool fits = static_cast<std::size_t>(n) <= ids.size();
    ids.resize(static_cast<std::size_t>(n));
    if (fits) return ids;  // otherwise the normaliser expanded the text: call again with room
  }
}

void SentencePieceTokenizer::choose_continuation() {
  // No piece may join a non-space to a following space (decode shows a piece's interior spaces;
  // <unk> decodes to " ⁇ " and is never merged into).
  const int32_t unk = shim_->unk_id(static_cast<const qeval_spm*>(handle_));
  for (std::int32_t id = 0; id < vocab_size_; ++id) {
    if (id == unk) continue;
    const std::string piece = decode({id});
    for (std::size_t i = 1; i < piece.size(); ++i)
      if (piece[i] == ' ' && piece[i - 1] != ' ') return;
  }
  // The normaliser's handling of a leading space, tried on texts cut the way continuation_cut cuts.
  const char* probes[] = {"ab cd", "a b c d", "the  end is near", "one, two. Three", "x y", "Hello world!"};
  auto works = [&](Continuation how) {
    for (const char* probe : probes) {
      const std::string_view t(probe);
      const std::size_t cut = cut_before_space(t, t.size());
      std::vector<std::int32_t> joined = encode(t.substr(0, cut));
      const std::string_view rest = how == Continuation::drop_space ? t.substr(cut + 1) : t.substr(cut);
      const std::vector<std::int32_t> tail = encode(rest);
      joined.insert(joined.end(), tail.begin(), tail.end());
      if (joined != encode(t)) return false;
    }
    return true;
  };
  if (works(Continuation::drop_space))
    continuation_ = Continuation::drop_space;
  else if (works(Continuation::keep_space))
    continuation_ = Continuation::keep_space;
}

std::size_t SentencePieceTokenizer::continuation_cut(std::string_view text, std::size_t limit) const {
  return continuation_ == Continuation::none ? 0 : cut_before_space(text, limit);
}

std::vector<std::int32_t> SentencePieceTokenizer::encode_continuation(std::string_view text) const {
  if (continuation_ == Continuation::drop_space && !text.empty() && text.front() == ' ') text.remove_prefix(1);
  return encode(text);
}

std::string SentencePieceTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  auto* h = static_cast<const qeval_spm*>(handle_);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    QEVAL_CHECK(ids[i] >= 0 && ids[i] < vocab_size_,
                "{}: cannot decode token {} at position {}: vocabulary size is {}", source_, ids[i], i, vocab_size_);
  }
  std::string text(ids.size() * 8 + 16, '\0');
  std::array<char, 1024> err{};
  for (;;) {
    const long n = shim_->decode(h, ids.data(), ids.size(), text.data(), text.size(), err.data(), err.size());
    QEVAL_CHECK(n >= 0, "{}: SentencePiece decode of {} ids failed: {}", source_, ids.size(), err.data());
    const bool fits = static_cast<std::size_t>(n) <= text.size();
    text.resize(static_cast<std::size_t>(n));
    if (fits) return text;
  }
}

}  // namespace qeval

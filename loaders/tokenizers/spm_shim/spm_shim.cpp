// libqeval_spm_shim.so: libsentencepiece behind the C ABI of spm_shim.h. Built as a CMake
// MODULE with hidden visibility, so the ABI functions are all it exports.
#include "loaders/tokenizers/spm_shim/spm_shim.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace sentencepiece::logging {
void SetMinLogLevel(int v);  // exported by libsentencepiece, not declared in its public header
}

#define QEVAL_SPM_EXPORT __attribute__((visibility("default")))

struct qeval_spm {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

void set_error(char* err, size_t err_size, const std::string& message) {
  if (err == nullptr || err_size == 0) return;
  const size_t n = std::min(message.size(), err_size - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

// Under RTLD_DEEPBIND sentencepiece's std::cerr may resolve to libstdc++'s own, never
// constructed, copy (the executable holds the live one through a copy relocation), so its
// INFO/WARNING/ERROR logging is turned off: every error reaches the caller through a Status.
void quiet_logging() {
  static const bool done = [] {
    sentencepiece::logging::SetMinLogLevel(3);  // LOG_FATAL: only fatal errors would print
    return true;
  }();
  (void)done;
}

}  // namespace

extern "C" {

QEVAL_SPM_EXPORT int qeval_spm_abi_version(void) { return QEVAL_SPM_ABI_VERSION; }

QEVAL_SPM_EXPORT qeval_spm* qeval_spm_load(const char* path, char* err, size_t err_size) {
  try {
    quiet_logging();
    auto spm = new qeval_spm();
    const auto status = spm->processor.Load(path);
    if (!status.ok()) {
      set_error(err, err_size, status.ToString());
      delete spm;
      return nullptr;
    }
    return spm;
  } catch (const std::exception& e) {
    set_error(err, err_size, e.what());
    return nullptr;
  }
}

QEVAL_SPM_EXPORT void qeval_spm_free(qeval_spm* spm) { delete spm; }

QEVAL_SPM_EXPORT long qeval_spm_encode(const qeval_spm* spm, const char* text, size_t len, int32_t* ids,
                                       size_t capacity, char* err, size_t err_size) {
  try {
    std::vector<int> out;
    const auto status = spm->processor.Encode(absl::string_view(text, len), &out);
    if (!status.ok()) {
      set_error(err, err_size, status.ToString());
      return -1;
    }
    const size_t n = std::min(out.size(), capacity);
    for (size_t i = 0; i < n; ++i) ids[i] = out[i];
    return static_cast<long>(out.size());
  } catch (const std::exception& e) {
    set_error(err, err_size, e.what());
    return -1;
  }
}

QEVAL_SPM_EXPORT long qeval_spm_decode(const qeval_spm* spm, const int32_t* ids, size_t n, char* out,
                                       size_t capacity, char* err, size_t err_size) {
  try {
    const std::vector<int> in(ids, ids + n);
    std::string text;
    const auto status = spm->processor.Decode(in, &text);
    if (!status.ok()) {
      set_error(err, err_size, status.ToString());
      return -1;
    }
    std::memcpy(out, text.data(), std::min(text.size(), capacity));
    return static_cast<long>(text.size());
  } catch (const std::exception& e) {
    set_error(err, err_size, e.what());
    return -1;
  }
}

QEVAL_SPM_EXPORT int32_t qeval_spm_piece_size(const qeval_spm* spm) { return spm->processor.GetPieceSize(); }
QEVAL_SPM_EXPORT int32_t qeval_spm_bos_id(const qeval_spm* spm) { return spm->processor.bos_id(); }
QEVAL_SPM_EXPORT int32_t qeval_spm_eos_id(const qeval_spm* spm) { return spm->processor.eos_id(); }
QEVAL_SPM_EXPORT int32_t qeval_spm_unk_id(const qeval_spm* spm) { return spm->processor.unk_id(); }

}  // extern "C"

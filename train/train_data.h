// Training data: the same document stream as `qeval eval`'s windows protocol (documents
// tokenised one at a time, joined with the tokenizer's separator, cut into non-overlapping
// windows of seq_len tokens, a partial last window dropped). A window trains on predicting
// tokens 1..L-1 from their prefixes, exactly what eval scores.
//
// Split: the last ceil(val_fraction · N) windows of the stream (at least 1 when val_fraction
// > 0) are held out for validation; the rest train. Order: epoch e visits the training windows
// in a Fisher–Yates permutation drawn from std::mt19937_64 seeded with mix(seed, e); a batch
// takes the next batch_size windows of that endless sequence, crossing epoch boundaries. The
// data position is therefore just the number of windows consumed, and resuming needs only it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "loaders/text/documents.h"
#include "loaders/tokenizers/tokenizer.h"

namespace qeval::train {

struct TrainWindows {
  at::Tensor train;  // [N_train, seq_len] int64
  at::Tensor val;    // [N_val, seq_len] int64
  std::int64_t documents = 0;
  std::int64_t stream_tokens = 0;
  std::optional<std::int32_t> separator;
};

// bos_per_window: every window is BOS followed by seq_len - 1 stream tokens (eval's
// `--bos-per-window`), so every window opens the way a document does.
TrainWindows load_train_windows(const std::filesystem::path& data, const Tokenizer& tokenizer, std::int64_t seq_len,
                                double val_fraction, const DocumentOptions& documents = {},
                                bool bos_per_window = false);

class BatchOrder {
 public:
  BatchOrder(std::int64_t windows, std::uint64_t seed);
  // Indices of the windows at stream positions [position, position + count).
  std::vector<std::int64_t> take(std::int64_t position, std::int64_t count);

 private:
  const std::vector<std::int64_t>& epoch(std::int64_t e);
  std::int64_t windows_;
  std::uint64_t seed_;
  std::int64_t cached_epoch_ = -1;
  std::vector<std::int64_t> perm_;
};

}  // namespace qeval::train

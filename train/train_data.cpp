#include "train/train_data.h"

#include <cmath>
#include <random>

#include "common/error.h"
#include "loaders/protocols/protocol.h"

namespace qeval::train {

TrainWindows load_train_windows(const std::filesystem::path& data, const Tokenizer& tokenizer, std::int64_t seq_len,
                                double val_fraction, const DocumentOptions& documents, bool bos_per_window) {
  QEVAL_CHECK(val_fraction >= 0 && val_fraction < 1, "training data: val fraction must be in [0, 1), got {}",
              val_fraction);
  ProtocolSpec spec;
  spec.seq_len = seq_len;
  spec.bos_per_window = bos_per_window;
  WindowStream stream(open_documents(data, documents), tokenizer, spec);
  std::vector<std::int64_t> flat;
  std::int64_t n = 0;
  while (auto w = stream.next()) {
    flat.insert(flat.end(), w->tokens.begin(), w->tokens.end());
    ++n;
  }
  const std::int64_t n_val =
      val_fraction > 0 ? std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(val_fraction * n))) : 0;
  QEVAL_CHECK(n - n_val >= 1, "training data {}: {} windows of {} tokens, {} held out: nothing left to train on",
              data.string(), n, seq_len, n_val);
  at::Tensor all = at::tensor(flat, at::kLong).reshape({n, seq_len});
  TrainWindows out;
  out.train = all.narrow(0, 0, n - n_val).contiguous();
  out.val = all.narrow(0, n - n_val, n_val).contiguous();
  out.documents = stream.documents_read();
  out.stream_tokens = stream.stream_tokens();
  out.separator = stream.separator_id();
  return out;
}

BatchOrder::BatchOrder(std::int64_t windows, std::uint64_t seed) : windows_(windows), seed_(seed) {
  QEVAL_CHECK(windows >= 1, "BatchOrder: need at least one window, got {}", windows);
}

const std::vector<std::int64_t>& BatchOrder::epoch(std::int64_t e) {
  if (e == cached_epoch_) return perm_;
  std::mt19937_64 rng(seed_ * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(e) + 1);
  perm_.resize(static_cast<std::size_t>(windows_));
  for (std::int64_t i = 0; i < windows_; ++i) perm_[static_cast<std::size_t>(i)] = i;
  // Fisher–Yates with our own index draw: std::shuffle's algorithm is library-defined.
  for (std::int64_t i = windows_ - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(perm_[static_cast<std::size_t>(i)], perm_[static_cast<std::size_t>(j)]);
  }
  cached_epoch_ = e;
  return perm_;
}

std::vector<std::int64_t> BatchOrder::take(std::int64_t position, std::int64_t count) {
  std::vector<std::int64_t> out;
  for (std::int64_t k = position; k < position + count; ++k)
    out.push_back(epoch(k / windows_)[static_cast<std::size_t>(k % windows_)]);
  return out;
}

}  // namespace qeval::train

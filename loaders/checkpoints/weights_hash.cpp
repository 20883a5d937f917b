#include "loaders/checkpoints/weights_hash.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"
#include "common/hash.h"
#include "common/phases.h"

namespace qeval {

namespace fs = std::filesystem;

struct TensorHashes::Entry {
  std::string dtype;
  std::vector<std::int64_t> shape;
  fs::path file;
  std::uint64_t offset = 0, bytes = 0;
  std::mutex mutex;
  std::unique_ptr<Hasher> hasher;  // while the tensor is part way
  std::uint64_t next = 0;          // bytes [0, next) are hashed
  std::string hex;                 // set once every byte is

  // Hashes what of [begin, begin + n) follows `next`; with the entry's lock held.
  void take(std::uint64_t begin, const char* data, std::uint64_t n) {
    if (!hex.empty() || begin > next || begin + n <= next) return;
    const std::uint64_t skip = next - begin;
    if (!hasher) hasher = std::make_unique<Hasher>();
    hasher->update(data + skip, n - skip);
    next = begin + n;
    if (next == bytes) close();
  }
  void close() {
    if (!hasher) hasher = std::make_unique<Hasher>();  // a tensor of 0 bytes
    hex = hasher->hex();
    hasher.reset();
  }
};

TensorHashes::TensorHashes() = default;
TensorHashes::~TensorHashes() = default;

void TensorHashes::add(const std::string& name, const std::string& dtype, const std::vector<std::int64_t>& shape,
                       const fs::path& file, std::uint64_t offset, std::uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  QEVAL_CHECK(result_.empty(), "weights hash: tensor {} added after the hash was finished", name);
  auto entry = std::make_unique<Entry>();
  entry->dtype = dtype;
  entry->shape = shape;
  entry->file = file;
  entry->offset = offset;
  entry->bytes = bytes;
  QEVAL_CHECK(entries_.emplace(name, std::move(entry)).second, "weights hash: tensor {} is listed twice", name);
}

bool TensorHashes::has(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.count(name) != 0;
}

void TensorHashes::saw(const std::string& name, std::uint64_t begin, const void* data, std::uint64_t n) {
  Entry* e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return;
    e = it->second.get();
  }
  std::lock_guard<std::mutex> lock(e->mutex);
  if (!e->hex.empty() || begin > e->next || begin + n <= e->next) return;  // nothing new: no phase switch
  QEVAL_CHECK(begin + n <= e->bytes, "weights hash: tensor {}: bytes [{}, {}) of {} handed over", name, begin, begin + n,
              e->bytes);
  PhaseScope hash(Phase::hash);
  e->take(begin, static_cast<const char*>(data), n);
}

namespace {

// Reads [offset, offset + bytes) of `path` in pieces, handing each to `f(data, n)`.
template <typename F>
void read_pieces(const fs::path& path, std::uint64_t offset, std::uint64_t bytes, const std::string& tensor, F&& f) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QEVAL_CHECK(fd >= 0, "weights hash: cannot open {} to read tensor {}", path.string(), tensor);
  std::vector<char> buffer(std::min<std::uint64_t>(bytes, 16u << 20));
  std::uint64_t done = 0;
  while (done < bytes) {
    const std::uint64_t want = std::min<std::uint64_t>(buffer.size(), bytes - done);
    const ssize_t n = ::pread(fd, buffer.data(), want, static_cast<off_t>(offset + done));
    if (n <= 0) {
      ::close(fd);
      fail("weights hash: {}: tensor {}: read {} of {} bytes (file changed?)", path.string(), tensor, done, bytes);
    }
    f(buffer.data(), static_cast<std::uint64_t>(n));
    done += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
}

}  // namespace

std::string TensorHashes::finish(std::uint64_t* bytes_read) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes_read) *bytes_read = 0;
  if (!result_.empty()) return result_;
  PhaseScope hash(Phase::hash);
  std::vector<TensorHashLine> lines;
  for (auto& [name, e] : entries_) {
    std::lock_guard<std::mutex> entry_lock(e->mutex);
    if (e->hex.empty() && e->next < e->bytes) {
      QEVAL_CHECK(!e->file.empty(), "weights hash: tensor {} was held in memory but its bytes [{}, {}) were not hashed",
                  name, e->next, e->bytes);
      const std::uint64_t begin = e->next;
      // A named entry, not the structured binding: C++17 lambdas may not capture bindings (clang refuses).
      auto& entry = *e;
      read_pieces(entry.file, entry.offset + begin, entry.bytes - begin, name,
                  [&entry](const char* data, std::uint64_t n) { entry.take(entry.next, data, n); });
      if (bytes_read) *bytes_read += e->bytes - begin;
    }
    if (e->hex.empty()) e->close();
    lines.push_back({name, e->dtype, e->shape, e->hex});
  }
  result_ = combine_tensor_hashes(std::move(lines));
  return result_;
}

std::map<std::string, std::string> TensorHashes::tensor_hashes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, std::string> out;
  for (const auto& [name, e] : entries_) {
    std::lock_guard<std::mutex> entry_lock(e->mutex);
    out[name] = e->hex;
  }
  return out;
}

std::string combine_tensor_hashes(std::vector<TensorHashLine> lines) {
  std::sort(lines.begin(), lines.end(), [](const TensorHashLine& a, const TensorHashLine& b) { return a.name < b.name; });
  Hasher hasher;
  for (const auto& l : lines) {
    QEVAL_CHECK(l.hash.size() == 16, "weights hash: tensor {} has no hash", l.name);
    hasher.update(fmt::format("{}{}{}{}{}{}{}\n", l.name, '\0', l.dtype, '\0', fmt::join(l.shape, ","), '\0', l.hash));
  }
  return hasher.hex();
}

std::string legacy_file_bytes_hash(std::vector<fs::path> files) {
  QEVAL_CHECK(!files.empty(), "legacy_file_bytes_hash: no files");
  PhaseScope hash(Phase::hash);
  if (files.size() == 1) return hash_file(files.front());
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  Hasher hasher;
  for (const auto& f : files) {
    hasher.update(f.filename().string());
    hasher.update(std::string_view("\0", 1));
    hasher.update(hash_file(f));
    hasher.update("\n");
  }
  return hasher.hex();
}

std::string recorded_weights_hash_kind(const nlohmann::json& model) {
  if (!model.is_object() || !model.contains("weights_hash_kind")) return kLegacyWeightsHashKind;
  const nlohmann::json& kind = model["weights_hash_kind"];
  return kind.is_string() ? kind.get<std::string>() : kind.dump();
}

}  // namespace qeval

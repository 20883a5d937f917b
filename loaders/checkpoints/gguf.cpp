#include "loaders/checkpoints/gguf.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <memory>

#include "common/error.h"
#include "common/phases.h"
#include "common/files.h"
#include "quant/formats/ggml/blocks.h"
#include "loaders/checkpoints/weights_hash.h"

namespace qeval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;            // arrays of arrays are legal; deeper nesting is not seen in practice
constexpr std::uint32_t kNumValueTypes = 13;

// Bounded reads from the file: every read first checks that the bytes exist.
class Cursor {
 public:
  Cursor(const fs::path& path, std::uint64_t size) : file_(path.string()), size_(size), in_(path, std::ios::binary) {
    QEVAL_CHECK(in_.good(), "cannot open {}", file_);
  }
  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return size_ - pos_; }

  void read(void* dst, std::uint64_t n, const std::string& what) {
    QEVAL_CHECK(n <= remaining(), "{}: truncated GGUF: {} needs {} bytes at offset {}, but the file ends at {}", file_,
                what, n, pos_, size_);
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    QEVAL_CHECK(static_cast<std::uint64_t>(in_.gcount()) == n, "{}: read error at offset {}", file_, pos_);
    pos_ += n;
  }
  template <typename T>
  T get(const std::string& what) {
    T v{};
    read(&v, sizeof(T), what);
    return v;
  }
  std::string str(const std::string& what) {
    const auto n = get<std::uint64_t>(what + " length");
    QEVAL_CHECK(n <= remaining(), "{}: truncated GGUF: {} says {} bytes at offset {}, but only {} remain", file_, what,
                n, pos_, remaining());
    std::string s(n, '\0');
    read(s.data(), n, what);
    return s;
  }

 private:
  std::string file_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  std::ifstream in_;
};

// Smallest encoded size of one value of `type` (bounds array counts before allocating).
std::uint64_t min_value_bytes(std::uint32_t type) {
  static const std::array<std::uint64_t, kNumValueTypes> sizes{1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};
  return sizes[type];
}

json read_value(Cursor& c, std::uint32_t type, const std::string& key, const std::string& file, int depth) {
  switch (type) {
    case 0: return c.get<std::uint8_t>(key);
    case 1: return c.get<std::int8_t>(key);
    case 2: return c.get<std::uint16_t>(key);
    case 3: return c.get<std::int16_t>(key);
    case 4: return c.get<std::uint32_t>(key);
    case 5: return c.get<std::int32_t>(key);
    case 6: return static_cast<double>(c.get<float>(key));
    case 7: {
      const auto b = c.get<std::uint8_t>(key);
      QEVAL_CHECK(b <= 1, "{}: metadata {}: bool value {}, expected 0 or 1", file, key, b);
      return b == 1;
    }
    case 8: return c.str(key);
    case 9: {
      QEVAL_CHECK(depth < kMaxArrayDepth, "{}: metadata {}: arrays nested deeper than {}", file, key, kMaxArrayDepth);
      const auto elem = c.get<std::uint32_t>(key + " array type");
      QEVAL_CHECK(elem < kNumValueTypes, "{}: metadata {}: unknown array element type {}, expected 0..{}", file, key,
                  elem, kNumValueTypes - 1);
      const auto n = c.get<std::uint64_t>(key + " array length");
      QEVAL_CHECK(n <= c.remaining() / min_value_bytes(elem),
                  "{}: truncated GGUF: metadata {} says {} array elements, but only {} bytes remain", file, key, n,
                  c.remaining());
      json arr = json::array();
      for (std::uint64_t i = 0; i < n; ++i) arr.push_back(read_value(c, elem, key, file, depth + 1));
      return arr;
    }
    case 10: return c.get<std::uint64_t>(key);
    case 11: return c.get<std::int64_t>(key);
    case 12: return c.get<double>(key);
    default: fail("{}: metadata {} has unknown value type {}, expected 0..{}", file, key, type, kNumValueTypes - 1);
  }
}

}  // namespace

std::vector<std::int64_t> GgufTensorInfo::shape() const {
  return std::vector<std::int64_t>(ne.rbegin(), ne.rend());
}

GgufFile::GgufFile(fs::path path) : path_(std::move(path)) {
  const std::string file = path_.string();
  const std::uint64_t size = qeval::file_size(path_);
  Cursor c(path_, size);
  char magic[4] = {};
  c.read(magic, 4, "the magic \"GGUF\"");
  QEVAL_CHECK(std::string(magic, 4) == "GGUF", "{}: bad magic {:?}, expected \"GGUF\"; not a GGUF file",
              file, std::string(magic, 4));
  version_ = c.get<std::uint32_t>("the version");
  QEVAL_CHECK(version_ == 2 || version_ == 3, "{}: GGUF version {}, expected 3 (or 2){}", file, version_,
              version_ >= (1u << 16) ? "; a big-endian file?" : "");
  const auto n_tensors = c.get<std::uint64_t>("the tensor count");
  const auto n_kv = c.get<std::uint64_t>("the metadata count");
  // Each entry needs at least a length field and a type: bound the counts by the file.
  QEVAL_CHECK(n_kv <= c.remaining() / 13 && n_tensors <= c.remaining() / 28,
              "{}: GGUF says {} metadata entries and {} tensors, more than its {} bytes can hold", file, n_kv,
              n_tensors, size);

  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = c.str(fmt::format("metadata key {}", i));
    const auto type = c.get<std::uint32_t>("the type of metadata " + key);
    QEVAL_CHECK(!metadata_.contains(key), "{}: metadata key {} appears twice", file, key);
    metadata_[key] = read_value(c, type, key, file, 0);
    value_types_[key] = type;
  }
  if (has("general.alignment")) {
    const json& a = metadata_["general.alignment"];
    QEVAL_CHECK(a.is_number_unsigned() && a.get<std::uint64_t>() > 0 &&
                    (a.get<std::uint64_t>() & (a.get<std::uint64_t>() - 1)) == 0,
                "{}: general.alignment {} should be a positive power of two", file, a.dump());
    alignment_ = a.get<std::uint64_t>();
  }

  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.str(fmt::format("tensor info {} name", i));
    const auto n_dims = c.get<std::uint32_t>("the dimension count of " + t.name);
    QEVAL_CHECK(n_dims >= 1 && n_dims <= kMaxDims, "{}: tensor {} has {} dimensions, expected 1..{}", file, t.name,
                n_dims, kMaxDims);
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      t.ne.push_back(c.get<std::uint64_t>("the dimensions of " + t.name));
      QEVAL_CHECK(t.ne.back() <= size && !__builtin_mul_overflow(numel, t.ne.back(), &numel),
                  "{}: tensor {} dimension {} is {}, impossible in a {}-byte file", file, t.name, d, t.ne.back(), size);
    }
    t.type = c.get<std::uint32_t>("the type of " + t.name);
    t.offset = c.get<std::uint64_t>("the offset of " + t.name);
    const GgmlTypeTraits* type = ggml_type_traits(t.type);
    if (type && type->block > 0) {
      QEVAL_CHECK(t.ne[0] % type->block == 0, "{}: tensor {} of type {} has {} columns, not a multiple of its block {}",
                  file, t.name, type->name, t.ne[0], type->block);
      QEVAL_CHECK(!__builtin_mul_overflow(numel / type->block, type->bytes, &t.bytes),
                  "{}: tensor {} of type {} with ne {} has a byte size beyond 64 bits", file, t.name, type->name,
                  fmt::join(t.ne, " x "));
    }
    QEVAL_CHECK(index_.emplace(t.name, tensors_.size()).second, "{}: tensor {} appears twice", file, t.name);
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  QEVAL_CHECK(data_offset_ <= size, "{}: truncated GGUF: the data area would start at {}, but the file ends at {}", file,
              data_offset_, size);
  const std::uint64_t data_bytes = size - data_offset_;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : tensors_) {
    QEVAL_CHECK(t.offset % alignment_ == 0, "{}: tensor {} offset {} is not a multiple of the alignment {}", file,
                t.name, t.offset, alignment_);
    QEVAL_CHECK(t.offset <= data_bytes && t.bytes <= data_bytes - t.offset,
                "{}: tensor {} spans [{}, {}) of the data area, which has {} bytes (file truncated?)", file, t.name,
                t.offset, t.offset + t.bytes, data_bytes);
    if (t.bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const auto *p = by_offset[i - 1], *t = by_offset[i];
    QEVAL_CHECK(p->offset + p->bytes <= t->offset, "{}: tensors {} [{}, {}) and {} [{}, {}) overlap", file, p->name,
                p->offset, p->offset + p->bytes, t->name, t->offset, t->offset + t->bytes);
  }
}

std::uint32_t GgufFile::value_type(const std::string& key) const {
  auto it = value_types_.find(key);
  if (it == value_types_.end()) fail("{}: missing metadata key {}", path_.string(), key);
  return it->second;
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("{}: missing tensor {} ({} tensors in the file)", path_.string(), name, tensors_.size());
  return tensors_[it->second];
}

at::Tensor GgufFile::read_float32(const std::string& name) const {
  const std::vector<std::int64_t> shape = tensor(name).shape();
  return read_float32_rows(name, 0, shape.empty() ? 1 : shape[0]).reshape(shape);
}

at::Tensor GgufFile::read_float32_rows(const std::string& name, std::int64_t begin, std::int64_t count) const {
  const GgufTensorInfo& t = tensor(name);
  QEVAL_CHECK(ggml_type_dequantizable(t.type),
              "{}: tensor {} has type {} (ggml type {}), which qeval cannot read; supported GGUF tensor types: {}",
              path_.string(), name, ggml_type_name(t.type), t.type, ggml_dequantizable_types());
  std::vector<std::int64_t> shape = t.shape();
  if (shape.empty()) shape = {1};
  const std::int64_t rows = shape[0];
  QEVAL_CHECK(begin >= 0 && count >= 0 && begin + count <= rows, "{}: tensor {} has {} rows: rows [{}, {}) asked for",
              path_.string(), name, rows, begin, begin + count);
  shape[0] = count;
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  const auto n = static_cast<std::uint64_t>(out.numel());
  // Every row is a whole number of blocks (checked on open), so a row's bytes are the tensor's
  // bytes over its rows: read that span (F32 straight into the output), then dequantise;
  // dequantize_ggml checks the byte count against n again.
  const bool whole = begin == 0 && count == rows;
  QEVAL_CHECK(whole || (t.ne.size() >= 2 && t.bytes % static_cast<std::uint64_t>(rows) == 0),
              "{}: tensor {}: rows of a {}-dimensional {} tensor cannot be read apart", path_.string(), name, t.ne.size(),
              ggml_type_name(t.type));
  const std::uint64_t row_bytes = rows > 0 ? t.bytes / static_cast<std::uint64_t>(rows) : 0;
  const std::uint64_t bytes = whole ? t.bytes : row_bytes * static_cast<std::uint64_t>(count);
  const bool direct = t.type == static_cast<std::uint32_t>(GgmlType::F32);
  QEVAL_CHECK(!direct || bytes == n * sizeof(float), "{}: tensor {}: {} bytes for {} F32 elements", path_.string(),
              name, bytes, n);
  if (bytes == 0) return out;
  std::ifstream in(path_, std::ios::binary);
  QEVAL_CHECK(in.good(), "cannot open {} to read tensor {}", path_.string(), name);
  const std::uint64_t first = row_bytes * static_cast<std::uint64_t>(begin);
  in.seekg(static_cast<std::streamoff>(data_offset_ + t.offset + first));
  auto read_span = [&](char* into, std::uint64_t offset, std::uint64_t n_bytes) {
    PhaseScope read(Phase::read);
    in.read(into, static_cast<std::streamsize>(n_bytes));
    QEVAL_CHECK(static_cast<std::uint64_t>(in.gcount()) == n_bytes, "{}: tensor {}: short read (file changed?)",
                path_.string(), name);
    if (hashes_) hashes_->saw(name, first + offset, into, n_bytes);
  };
  if (direct) {
    read_span(reinterpret_cast<char*>(out.data_ptr<float>()), 0, bytes);
    return out;
  }
  // Stored blocks pass through a buffer of ~8 MiB, dequantised chunk by chunk: a buffer of the
  // tensor's size was fresh pages for the kernel to zero on every read (40 % of an F16 GGUF's
  // read and convert time on a 2-core Zen 4). dequantize_ggml checks each chunk's byte count.
  const GgmlBlockSize block = ggml_block_size(t.type);
  QEVAL_CHECK(bytes % block.bytes == 0 && bytes / block.bytes * block.elements == n,
              "{}: tensor {}: {} bytes of {} are not the {} elements asked for", path_.string(), name, bytes,
              ggml_type_name(t.type), n);
  const std::uint64_t chunk = std::max<std::uint64_t>(1, (std::uint64_t{8} << 20) / block.bytes) * block.bytes;
  std::unique_ptr<char[]> buffer(new char[std::min(chunk, bytes)]);
  float* y = out.data_ptr<float>();
  for (std::uint64_t done = 0; done < bytes;) {
    const std::uint64_t n_bytes = std::min(chunk, bytes - done);
    read_span(buffer.get(), done, n_bytes);
    PhaseScope convert(Phase::convert);
    dequantize_ggml(t.type, buffer.get(), n_bytes, y + done / block.bytes * block.elements,
                    n_bytes / block.bytes * block.elements, fmt::format("{}: tensor {}", path_.string(), name));
    done += n_bytes;
  }
  return out;
}

void GgufFile::hash_reads_into(std::shared_ptr<TensorHashes> hashes) {
  for (const auto& t : tensors_) hashes->add(t.name, ggml_type_name(t.type), t.shape(), path_, data_offset_ + t.offset, t.bytes);
  hashes_ = std::move(hashes);
}

}  // namespace qeval

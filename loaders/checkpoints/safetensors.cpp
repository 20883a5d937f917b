#include "loaders/checkpoints/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <thread>
#include <vector>
#include <optional>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/error.h"
#include "common/phases.h"
#include "common/files.h"
#include "common/json_integer.h"
#include "loaders/checkpoints/weights_hash.h"

namespace qeval {
namespace {

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// An empty tensor (a 0 in its shape) owns no bytes, so the data area cannot bound its other
// dimensions; this does, far above any real axis, so sizes and strides stay inside int64.
constexpr std::uint64_t kMaxDimension = std::uint64_t{1} << 40;

struct DtypeEntry {
  const char* name;
  at::ScalarType type;
  std::uint64_t bytes;
};
// LibTorch 1.13 has no float8 dtypes: F8_E4M3 and F8_E5M2 are read as their bytes (uint8), which
// the checkpoint codecs decode (quant/formats/stored_tensors.h, minifloat.h). After U8, so a
// uint8 tensor is written as U8 unless the writer names an F8 dtype.
const std::array<DtypeEntry, 12> kDtypes{{{"F32", at::kFloat, 4},
                                          {"F16", at::kHalf, 2},
                                          {"BF16", at::kBFloat16, 2},
                                          {"F64", at::kDouble, 8},
                                          {"I64", at::kLong, 8},
                                          {"I32", at::kInt, 4},
                                          {"I16", at::kShort, 2},
                                          {"I8", at::kChar, 1},
                                          {"U8", at::kByte, 1},
                                          {"BOOL", at::kBool, 1},
                                          {"F8_E4M3", at::kByte, 1},
                                          {"F8_E5M2", at::kByte, 1}}};

const DtypeEntry* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const DtypeEntry* find_dtype(at::ScalarType type) {
  for (const auto& d : kDtypes)
    if (type == d.type) return &d;
  return nullptr;
}

std::string known_dtypes() {
  std::string out;
  for (const auto& d : kDtypes) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

std::uint64_t read_u64_le(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// One header entry → info; `file` and `name` only for messages.
SafetensorsTensorInfo parse_entry(const nlohmann::json& e, const std::string& file, const std::string& name,
                                  std::uint64_t data_bytes) {
  QEVAL_CHECK(e.is_object(), "{}: header entry for tensor {} should be an object, found {}", file, name, e.type_name());
  SafetensorsTensorInfo info;
  QEVAL_CHECK(e.contains("dtype") && e["dtype"].is_string(), "{}: tensor {} has no string \"dtype\"", file, name);
  info.dtype = e["dtype"].get<std::string>();
  const DtypeEntry* dtype = find_dtype(info.dtype);
  QEVAL_CHECK(dtype != nullptr, "{}: tensor {} has unsupported dtype {}; expected one of {}", file, name, info.dtype,
              known_dtypes());
  info.scalar_type = dtype->type;

  QEVAL_CHECK(e.contains("shape") && e["shape"].is_array(), "{}: tensor {} has no \"shape\" array", file, name);
  std::uint64_t numel = 1;
  std::uint64_t nonzero = 1;  // product of the non-zero dimensions (strides of an empty tensor)
  for (const auto& d : e["shape"]) {
    const auto as_unsigned = json_uint64(d);
    QEVAL_CHECK(as_unsigned.has_value(), "{}: tensor {} has shape {}, expected non-negative integers", file, name,
                e["shape"].dump());
    std::uint64_t dim = *as_unsigned;
    // Any dimension beyond the data area's size cannot match a byte span; refusing it here
    // also keeps the product below from overflowing.
    QEVAL_CHECK(dim <= data_bytes || numel == 0, "{}: tensor {} has shape {}, larger than the {}-byte data area", file,
                name, e["shape"].dump(), data_bytes);
    QEVAL_CHECK(dim <= kMaxDimension, "{}: tensor {} has shape {}, a dimension above the limit {}", file, name,
                e["shape"].dump(), kMaxDimension);
    QEVAL_CHECK(dim == 0 || (!__builtin_mul_overflow(nonzero, dim, &nonzero) && nonzero <= kMaxDimension),
                "{}: tensor {} has shape {}, whose non-zero dimensions multiply beyond {}", file, name,
                e["shape"].dump(), kMaxDimension);
    QEVAL_CHECK(!__builtin_mul_overflow(numel, dim, &numel), "{}: tensor {} shape {} overflows", file, name,
                e["shape"].dump());
    info.shape.push_back(static_cast<std::int64_t>(dim));
  }
  std::uint64_t expected_bytes = 0;
  QEVAL_CHECK(!__builtin_mul_overflow(numel, dtype->bytes, &expected_bytes), "{}: tensor {} shape {} overflows", file,
              name, e["shape"].dump());

  const auto& off = e.contains("data_offsets") ? e["data_offsets"] : nlohmann::json();
  const bool two = off.is_array() && off.size() == 2;
  const auto begin = two ? json_uint64(off[0]) : std::nullopt, end = two ? json_uint64(off[1]) : std::nullopt;
  QEVAL_CHECK(begin && end, "{}: tensor {} needs \"data_offsets\": [begin, end] of non-negative integers, found {}", file,
              name, off.dump());
  info.begin = *begin;
  info.end = *end;
  QEVAL_CHECK(info.begin <= info.end, "{}: tensor {} has data_offsets [{}, {}] with begin after end", file, name,
              info.begin, info.end);
  QEVAL_CHECK(info.end <= data_bytes,
              "{}: tensor {} has data_offsets [{}, {}] outside the data area of {} bytes (file truncated?)", file,
              name, info.begin, info.end, data_bytes);
  QEVAL_CHECK(info.end - info.begin == expected_bytes,
              "{}: tensor {} spans {} bytes, but dtype {} and shape {} need {} bytes", file, name,
              info.end - info.begin, info.dtype, e["shape"].dump(), expected_bytes);
  return info;
}

}  // namespace

SafetensorsFile::SafetensorsFile(std::filesystem::path path) : path_(std::move(path)) {
  const std::string file = path_.string();
  const std::uint64_t size = qeval::file_size(path_);
  QEVAL_CHECK(size >= 8, "{}: truncated safetensors file of {} bytes; expected at least the 8-byte header length",
              file, size);
  std::ifstream in(path_, std::ios::binary);
  QEVAL_CHECK(in.good(), "cannot open {}", file);
  char length_bytes[8];
  in.read(length_bytes, 8);
  const std::uint64_t header_bytes = read_u64_le(length_bytes);
  QEVAL_CHECK(header_bytes <= size - 8,
              "{}: safetensors header length {} goes beyond the end of the file ({} bytes after the length field)",
              file, header_bytes, size - 8);
  QEVAL_CHECK(header_bytes <= kMaxHeaderBytes, "{}: safetensors header length {} exceeds the {}-byte limit", file,
              header_bytes, kMaxHeaderBytes);
  std::string header(header_bytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  QEVAL_CHECK(static_cast<std::uint64_t>(in.gcount()) == header_bytes, "{}: could not read the {}-byte header", file,
              header_bytes);
  data_start_ = 8 + header_bytes;
  const std::uint64_t data_bytes = size - data_start_;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: safetensors header is not valid JSON: {}", file, e.what());
  }
  QEVAL_CHECK(j.is_object(), "{}: safetensors header should be a JSON object, found {}", file, j.type_name());

  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      QEVAL_CHECK(entry.is_object(), "{}: __metadata__ should be an object of strings, found {}", file,
                  entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        QEVAL_CHECK(value.is_string(), "{}: __metadata__ entry {} should be a string, found {}", file, key,
                    value.type_name());
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    infos_[name] = parse_entry(entry, file, name, data_bytes);
    names_.push_back(name);
  }
  std::sort(names_.begin(), names_.end(), [&](const std::string& a, const std::string& b) {
    const auto &x = infos_.at(a), &y = infos_.at(b);
    return std::pair(x.begin, x.end) < std::pair(y.begin, y.end);
  });
  // Sorted by begin, spans can only overlap their successor's; empty tensors own no bytes.
  const std::string* previous = nullptr;
  for (const auto& name : names_) {
    const auto& info = infos_.at(name);
    if (info.begin == info.end) continue;
    if (previous) {
      const auto& p = infos_.at(*previous);
      QEVAL_CHECK(p.end <= info.begin, "{}: tensors {} [{}, {}] and {} [{}, {}] overlap in the data area", file,
                  *previous, p.begin, p.end, name, info.begin, info.end);
    }
    previous = &name;
  }
  // The data area is the tensors' bytes and nothing else (as the reference reader requires):
  // bytes after the last tensor mean a file appended to, or a header that forgot a tensor.
  std::uint64_t last_end = 0;
  for (const auto& [name, info] : infos_) last_end = std::max(last_end, info.end);
  QEVAL_CHECK(last_end == data_bytes, "{}: {} bytes after the last tensor's data (the data area has {} bytes, the tensors "
              "end at {}); not a safetensors file as written, or a tensor missing from the header",
              file, data_bytes - last_end, data_bytes, last_end);
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) fail("{}: missing tensor {} ({} tensors in the file)", path_.string(), name, infos_.size());
  return it->second;
}

namespace {
thread_local at::Device read_floats_onto = at::Device(at::kCPU);

// Reads bytes [offset, offset + bytes) of `path` into `out` with `threads` threads, each a
// contiguous slice by pread. One thread copies from the page cache at a few GB/s; a GPU plan's
// read of the next layer (its host is otherwise idle) takes several. Throws naming the file.
void read_span(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t bytes, char* out, int threads,
               const std::string& tensor) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QEVAL_CHECK(fd >= 0, "cannot open {} to read tensor {}", path.string(), tensor);
  const std::uint64_t slice = (bytes + static_cast<std::uint64_t>(threads) - 1) / static_cast<std::uint64_t>(threads);
  std::vector<std::uint64_t> short_by(static_cast<std::size_t>(threads), 0);
  auto read_slice = [&](int t) {
    std::uint64_t begin = slice * static_cast<std::uint64_t>(t), end = std::min(bytes, begin + slice);
    while (begin < end) {
      const ssize_t n = ::pread(fd, out + begin, end - begin, static_cast<off_t>(offset + begin));
      if (n <= 0) break;
      begin += static_cast<std::uint64_t>(n);
    }
    if (begin < end) short_by[static_cast<std::size_t>(t)] = end - begin;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(read_slice, t);
  read_slice(0);
  for (auto& th : pool) th.join();
  ::close(fd);
  std::uint64_t missing = 0;
  for (std::uint64_t m : short_by) missing += m;
  QEVAL_CHECK(missing == 0, "{}: tensor {}: read {} of {} bytes (file changed?)", path.string(), tensor, bytes - missing,
              bytes);
}

constexpr std::uint64_t kBytesPerReadThread = 32ull << 20;
constexpr int kMaxReadThreads = 8;

// FP8 weights have no meaning without their scales: the quantised-checkpoint reader decodes them.
std::string fp8_hint(const SafetensorsTensorInfo& entry) {
  return entry.dtype.rfind("F8_", 0) == 0 ? " (FP8 bytes are decoded with their scales by the quantised-checkpoint reader)"
                                          : "";
}

}  // namespace

ReadFloatsOnto::ReadFloatsOnto(const at::Device& device) : previous_(read_floats_onto) { read_floats_onto = device; }
ReadFloatsOnto::~ReadFloatsOnto() { read_floats_onto = previous_; }
at::Device ReadFloatsOnto::current() { return read_floats_onto; }

at::Tensor SafetensorsFile::read(const std::string& name, bool pinned) const {
  PhaseScope read(Phase::read);
  const auto& entry = info(name);
  at::Tensor t = at::empty(entry.shape, at::TensorOptions().dtype(entry.scalar_type).pinned_memory(pinned));
  const std::uint64_t bytes = entry.end - entry.begin;
  if (bytes == 0) return t;
  if (pinned) {  // a GPU plan's read: several threads (see read_span)
    const int threads = static_cast<int>(std::clamp<std::uint64_t>(bytes / kBytesPerReadThread, 1, kMaxReadThreads));
    read_span(path_, data_start_ + entry.begin, bytes, static_cast<char*>(t.data_ptr()), threads, name);
    if (hashes_) hashes_->saw(name, 0, t.data_ptr(), bytes);
    return t;
  }
  std::ifstream in(path_, std::ios::binary);
  QEVAL_CHECK(in.good(), "cannot open {} to read tensor {}", path_.string(), name);
  in.seekg(static_cast<std::streamoff>(data_start_ + entry.begin));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
  QEVAL_CHECK(static_cast<std::uint64_t>(in.gcount()) == bytes, "{}: tensor {}: read {} of {} bytes (file changed?)",
              path_.string(), name, in.gcount(), bytes);
  if (hashes_) hashes_->saw(name, 0, t.data_ptr(), bytes);
  return t;
}

at::Tensor SafetensorsFile::read_float32(const std::string& name) const {
  const auto& entry = info(name);
  QEVAL_CHECK(at::isFloatingType(entry.scalar_type),
              "{}: tensor {} has dtype {}, expected a floating-point dtype (F32, F16, BF16 or F64){}", path_.string(),
              name, entry.dtype, fp8_hint(entry));
  const at::Device onto = read_floats_onto;
  if (!onto.is_cpu()) {
    const at::Tensor stored = read(name, /*pinned=*/true);
    at::Tensor copied;
    {
      // Asynchronous from pinned memory: the host allocator keeps the buffer until the copy is done.
      PhaseScope copy(Phase::copy);
      copied = stored.to(onto, /*non_blocking=*/true);
    }
    if (entry.scalar_type == at::kFloat) return copied;
    PhaseScope convert(Phase::convert);
    return copied.to(at::kFloat);
  }
  at::Tensor t = read(name);
  if (entry.scalar_type == at::kFloat) return t;
  PhaseScope convert(Phase::convert);
  return t.to(at::kFloat);
}

at::Tensor SafetensorsFile::read_float32(const std::string& name, const std::vector<std::int64_t>& expected_shape) const {
  const auto& entry = info(name);
  QEVAL_CHECK(entry.shape == expected_shape, "{}: tensor {} has shape [{}], expected [{}]", path_.string(), name,
              fmt::join(entry.shape, ", "), fmt::join(expected_shape, ", "));
  return read_float32(name);
}

at::Tensor SafetensorsFile::read_float32_rows(const std::string& name, std::int64_t begin, std::int64_t count) const {
  const auto& entry = info(name);
  QEVAL_CHECK(at::isFloatingType(entry.scalar_type),
              "{}: tensor {} has dtype {}, expected a floating-point dtype (F32, F16, BF16 or F64)", path_.string(),
              name, entry.dtype);
  QEVAL_CHECK(!entry.shape.empty() && begin >= 0 && count >= 0 && begin + count <= entry.shape[0],
              "{}: tensor {} of shape [{}]: rows [{}, {}) asked for", path_.string(), name, fmt::join(entry.shape, ", "),
              begin, begin + count);
  std::vector<std::int64_t> shape = entry.shape;
  shape[0] = count;
  std::optional<PhaseScope> read(std::in_place, Phase::read);
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(entry.scalar_type));
  const std::uint64_t row_bytes = entry.shape[0] > 0 ? (entry.end - entry.begin) / static_cast<std::uint64_t>(entry.shape[0]) : 0;
  const std::uint64_t bytes = row_bytes * static_cast<std::uint64_t>(count);
  if (bytes > 0) {
    std::ifstream in(path_, std::ios::binary);
    QEVAL_CHECK(in.good(), "cannot open {} to read tensor {}", path_.string(), name);
    in.seekg(static_cast<std::streamoff>(data_start_ + entry.begin + row_bytes * static_cast<std::uint64_t>(begin)));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
    QEVAL_CHECK(static_cast<std::uint64_t>(in.gcount()) == bytes, "{}: tensor {}: read {} of {} bytes (file changed?)",
                path_.string(), name, in.gcount(), bytes);
    if (hashes_) hashes_->saw(name, row_bytes * static_cast<std::uint64_t>(begin), t.data_ptr(), bytes);
  }
  read.reset();
  if (entry.scalar_type == at::kFloat) return t;
  PhaseScope convert(Phase::convert);
  return t.to(at::kFloat);
}

void SafetensorsFile::hash_reads_into(std::shared_ptr<TensorHashes> hashes) {
  for (const auto& name : names_) {
    const SafetensorsTensorInfo& entry = infos_.at(name);
    hashes->add(name, entry.dtype, entry.shape, path_, data_start_ + entry.begin, entry.end - entry.begin);
  }
  hashes_ = std::move(hashes);
}

std::map<std::string, at::Tensor> read_safetensors(const std::filesystem::path& path, bool to_float32) {
  SafetensorsFile file(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& name : file.names()) out[name] = to_float32 ? file.read_float32(name) : file.read(name);
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::map<std::string, std::string>& stored_dtypes) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;  // contiguous CPU copies, in name order
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    QEVAL_CHECK(name != "__metadata__", "write_safetensors {}: a tensor may not be named __metadata__", path.string());
    QEVAL_CHECK(tensor.defined(), "write_safetensors {}: tensor {} is undefined", path.string(), name);
    const DtypeEntry* dtype = find_dtype(tensor.scalar_type());
    QEVAL_CHECK(dtype != nullptr, "write_safetensors {}: tensor {} has dtype {}, expected one of {}", path.string(),
                name, std::string(c10::toString(tensor.scalar_type())), known_dtypes());
    if (auto it = stored_dtypes.find(name); it != stored_dtypes.end()) {
      dtype = find_dtype(it->second);
      QEVAL_CHECK(dtype != nullptr && dtype->type == tensor.scalar_type(),
                  "write_safetensors {}: tensor {} of dtype {} cannot be stored as {}", path.string(), name,
                  std::string(c10::toString(tensor.scalar_type())), it->second);
    }
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * dtype->bytes;
    header[name] = {{"dtype", dtype->name}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string content;
  content.reserve(8 + json.size() + offset);
  for (int i = 0; i < 8; ++i) content.push_back(static_cast<char>((json.size() >> (8 * i)) & 0xff));
  content += json;
  for (const auto& t : data) content.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  write_file_atomic(path, content);
}

}  // namespace qeval

// llama.cpp's imatrix files (imatrix_file.h): the GGUF format through qeval's GGUF reader, the
// legacy format with a bounded cursor, both writers byte for byte as llama.cpp's.
#include "loaders/checkpoints/imatrix_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/gguf.h"

namespace qeval {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDatasets = "imatrix.datasets";
constexpr const char* kChunkCount = "imatrix.chunk_count";
constexpr const char* kChunkSize = "imatrix.chunk_size";
constexpr std::uint32_t kGgufAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT; imatrix files do not set another
constexpr std::uint32_t kGgufString = 8, kGgufArray = 9, kGgufU32 = 4, kGgmlF32 = 0;

bool remove_suffix(std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  s.resize(s.size() - suffix.size());
  return true;
}

std::string read_head(const fs::path& path, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  QEVAL_CHECK(in.good(), "{}: cannot open the imatrix file", path.string());
  std::string head(n, '\0');
  in.read(head.data(), static_cast<std::streamsize>(n));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head;
}

// ---- GGUF ----

std::int32_t u32_key(const GgufFile& f, const char* key) {
  if (!f.has(key)) return 0;
  // llama.cpp's gguf_get_val_u32 asserts the type (and aborts): refused here with the types.
  QEVAL_CHECK(f.value_type(key) == kGgufU32, "{}: imatrix metadata {} has GGUF value type {}, expected u32 ({})",
              f.path().string(), key, f.value_type(key), kGgufU32);
  const std::uint64_t v = f.metadata().at(key).get<std::uint64_t>();
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(v));  // llama.cpp keeps it in an int32_t
}

Imatrix read_gguf(const fs::path& path) {
  const GgufFile f(path);
  const std::string file = path.string();
  Imatrix m;
  QEVAL_CHECK(!f.tensors().empty(), "{}: an imatrix GGUF with no tensors; expected <name>.in_sum2 and <name>.counts",
              file);
  // As common_imatrix_load: the datasets when they are an array of strings, else none.
  if (f.has(kDatasets) && f.value_type(kDatasets) == kGgufArray) {
    const nlohmann::json& a = f.metadata().at(kDatasets);
    if (std::all_of(a.begin(), a.end(), [](const nlohmann::json& v) { return v.is_string(); }))
      for (const auto& v : a) m.datasets.push_back(v.get<std::string>());
  }
  m.has_metadata = f.has(kDatasets) && f.has(kChunkCount) && f.has(kChunkSize);
  m.chunk_count = u32_key(f, kChunkCount);
  m.chunk_size = u32_key(f, kChunkSize);

  std::map<std::string, std::pair<const GgufTensorInfo*, const GgufTensorInfo*>> pairs;
  for (const GgufTensorInfo& t : f.tensors()) {
    std::string name = t.name;
    if (name.empty()) continue;
    if (remove_suffix(name, ".in_sum2")) {
      pairs[name].first = &t;
    } else if (remove_suffix(name, ".counts")) {
      pairs[name].second = &t;
    }  // other tensors are not the imatrix's: ignored, as llama.cpp does
  }
  for (const auto& [name, p] : pairs) {
    QEVAL_CHECK(p.first && p.second, "{}: imatrix entry {} has {} but no {}", file, name,
                p.first ? name + ".in_sum2" : name + ".counts", p.first ? name + ".counts" : name + ".in_sum2");
    for (const GgufTensorInfo* t : {p.first, p.second})
      QEVAL_CHECK(t->type == kGgmlF32, "{}: imatrix tensor {} has ggml type {}, expected F32 (0)", file, t->name,
                  t->type);
    ImatrixEntry& e = m.entries[name];
    const at::Tensor sums = f.read_float32(p.first->name).reshape({-1});
    const at::Tensor counts = f.read_float32(p.second->name).reshape({-1});
    QEVAL_CHECK(counts.numel() >= 1 && sums.numel() % counts.numel() == 0,
                "{}: imatrix entry {}: {} sums for {} counts; expected one count per matrix, dividing the sums", file,
                name, sums.numel(), counts.numel());
    e.sums.assign(sums.data_ptr<float>(), sums.data_ptr<float>() + sums.numel());
    const float* c = counts.data_ptr<float>();
    for (std::int64_t j = 0; j < counts.numel(); ++j) {
      // lround of a NaN, an infinity or a count past int64 is undefined in C: refused.
      QEVAL_CHECK(std::isfinite(c[j]) && c[j] >= 0.0f && c[j] < 9.2e18f,
                  "{}: imatrix entry {}: count {} is {}; expected a finite token count >= 0", file, name, j, c[j]);
      e.counts.push_back(std::lround(c[j]));
    }
  }
  return m;
}

// ---- legacy ----

class LegacyCursor {
 public:
  LegacyCursor(const fs::path& path) : file_(path.string()), bytes_(read_file(path)) {}
  std::size_t remaining() const { return bytes_.size() - pos_; }
  bool at_end() const { return pos_ == bytes_.size(); }
  std::int32_t i32(const std::string& what) {
    QEVAL_CHECK(remaining() >= 4, "{}: truncated imatrix (legacy format): {} needs 4 bytes at offset {}, the file ends at {}",
                file_, what, pos_, bytes_.size());
    std::int32_t v;
    std::memcpy(&v, bytes_.data() + pos_, 4);
    pos_ += 4;
    return v;
  }
  std::string bytes(std::size_t n, const std::string& what) {
    QEVAL_CHECK(remaining() >= n, "{}: truncated imatrix (legacy format): {} needs {} bytes at offset {}, the file ends at {}",
                file_, what, n, pos_, bytes_.size());
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::string bytes_;
  std::size_t pos_ = 0;
};

Imatrix read_legacy(const fs::path& path) {
  LegacyCursor c(path);
  const std::string& file = c.file();
  Imatrix m;
  m.legacy = true;
  const std::int32_t n_entries = c.i32("the number of entries");
  QEVAL_CHECK(n_entries >= 1, "{}: not an imatrix: {} entries (legacy format: the file starts with the entry count; "
              "a GGUF imatrix starts with \"GGUF\")", file, n_entries);
  for (std::int32_t i = 0; i < n_entries; ++i) {
    const std::string what = fmt::format("entry {} of {}", i + 1, n_entries);
    const std::int32_t len = c.i32(what + "'s name length");
    QEVAL_CHECK(len >= 0 && static_cast<std::size_t>(len) <= c.remaining(),
                "{}: imatrix {} has a name of {} bytes; {} bytes remain", file, what, len, c.remaining());
    std::string name = c.bytes(static_cast<std::size_t>(len), what + "'s name");
    name = name.substr(0, name.find('\0'));  // llama.cpp reads the name as a C string
    const std::int32_t ncall = c.i32(what + " (" + name + ")'s ncall");
    const std::int32_t nval = c.i32(what + " (" + name + ")'s number of values");
    QEVAL_CHECK(nval >= 1 && static_cast<std::size_t>(nval) <= c.remaining() / 4,
                "{}: imatrix entry {} has {} values; expected at least 1 and at most the {} bytes left / 4", file, name,
                nval, c.remaining());
    QEVAL_CHECK(m.entries.count(name) == 0, "{}: imatrix entry {} appears twice", file, name);
    ImatrixEntry& e = m.entries[name];
    e.sums.resize(static_cast<std::size_t>(nval));
    const std::string data = c.bytes(static_cast<std::size_t>(nval) * 4, "entry " + name + "'s values");
    std::memcpy(e.sums.data(), data.data(), data.size());
    e.counts = {ncall};
  }
  // The chunk count and the dataset are optional, and read only where whole, as llama.cpp does.
  if (c.remaining() >= 4) {
    m.chunk_count = c.i32("the chunk count");
    if (c.remaining() >= 4) {
      const std::int32_t len = c.i32("the dataset name's length");
      if (len > 0 && static_cast<std::size_t>(len) <= c.remaining()) {
        const std::string dataset = c.bytes(static_cast<std::size_t>(len), "the dataset name");
        m.datasets.push_back(dataset.substr(0, dataset.find('\0')));
      }
    }
  }
  return m;
}

// ---- writers ----

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<std::uint64_t>(out, s.size());
  out += s;
}

void check_entry(const std::string& name, const ImatrixEntry& e, const char* op) {
  QEVAL_CHECK(!name.empty(), "{}: an imatrix entry has an empty name", op);
  QEVAL_CHECK(!e.counts.empty() && !e.sums.empty() && e.sums.size() % e.counts.size() == 0,
              "{}: imatrix entry {} has {} sums for {} counts; expected one count per matrix, dividing the sums", op,
              name, e.sums.size(), e.counts.size());
}

void pad(std::string& out, std::size_t alignment) { out.append((alignment - out.size() % alignment) % alignment, '\0'); }

}  // namespace

std::int64_t ImatrixEntry::columns() const {
  return counts.empty() ? 0 : static_cast<std::int64_t>(sums.size()) / static_cast<std::int64_t>(counts.size());
}

Imatrix read_imatrix(const fs::path& path) {
  std::error_code ec;
  QEVAL_CHECK(fs::exists(path, ec), "{}: no such imatrix file", path.string());
  QEVAL_CHECK(fs::is_regular_file(path, ec), "{}: not a regular file ({}); expected an imatrix file", path.string(),
              fs::is_directory(path, ec) ? "a folder" : "a device or other special file");
  if (read_head(path, 4) == "GGUF") return read_gguf(path);
  return read_legacy(path);
}

void write_imatrix_gguf(const Imatrix& m, const fs::path& path) {
  for (const auto& [name, e] : m.entries) check_entry(name, e, "write_imatrix_gguf");
  // gguf_write_to_file's layout: header, KV pairs, tensor infos, padding, each tensor's data padded.
  std::string kv;
  put_string(kv, "general.type");
  put<std::uint32_t>(kv, kGgufString);
  put_string(kv, "imatrix");
  put_string(kv, kDatasets);
  put<std::uint32_t>(kv, kGgufArray);
  put<std::uint32_t>(kv, kGgufString);
  put<std::uint64_t>(kv, m.datasets.size());
  for (const std::string& d : m.datasets) put_string(kv, d);
  put_string(kv, kChunkCount);
  put<std::uint32_t>(kv, kGgufU32);
  put<std::uint32_t>(kv, static_cast<std::uint32_t>(m.chunk_count));
  put_string(kv, kChunkSize);
  put<std::uint32_t>(kv, kGgufU32);
  put<std::uint32_t>(kv, static_cast<std::uint32_t>(m.chunk_size));

  std::string infos, data;
  std::uint64_t n_tensors = 0;
  auto add_tensor = [&](const std::string& name, std::int64_t ne0, std::int64_t ne1, const std::vector<float>& v) {
    put_string(infos, name);
    const std::uint32_t n_dims = ne1 > 1 ? 2 : 1;  // ggml_n_dims: trailing dimensions of 1 are not written
    put<std::uint32_t>(infos, n_dims);
    put<std::int64_t>(infos, ne0);
    if (n_dims == 2) put<std::int64_t>(infos, ne1);
    put<std::uint32_t>(infos, kGgmlF32);
    put<std::uint64_t>(infos, data.size());
    data.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    pad(data, kGgufAlignment);
    ++n_tensors;
  };
  for (const auto& [name, e] : m.entries) {
    const std::int64_t nmat = e.matrices();
    add_tensor(name + ".in_sum2", e.columns(), nmat, e.sums);
    std::vector<float> counts(e.counts.size());
    for (std::size_t j = 0; j < counts.size(); ++j) counts[j] = static_cast<float>(e.counts[j]);
    add_tensor(name + ".counts", 1, nmat, counts);
  }
  std::string out = "GGUF";
  put<std::uint32_t>(out, 3);
  put<std::int64_t>(out, static_cast<std::int64_t>(n_tensors));
  put<std::int64_t>(out, 4);
  out += kv;
  out += infos;
  pad(out, kGgufAlignment);
  out += data;
  write_file_atomic(path, out);
}

void write_imatrix_legacy(const Imatrix& m, const fs::path& path) {
  QEVAL_CHECK(m.chunk_size > 0, "write_imatrix_legacy {}: chunk_size is {}; the legacy format needs the tokens per "
              "chunk (> 0) to store ncall", path.string(), m.chunk_size);
  std::vector<const std::pair<const std::string, ImatrixEntry>*> stored;
  for (const auto& entry : m.entries) {
    check_entry(entry.first, entry.second, "write_imatrix_legacy");
    const bool any = std::any_of(entry.second.counts.begin(), entry.second.counts.end(), [](std::int64_t c) { return c != 0; });
    if (any) stored.push_back(&entry);  // an entry that saw no token is skipped, as llama.cpp does
  }
  std::string out;
  put<std::int32_t>(out, static_cast<std::int32_t>(stored.size()));
  for (const auto* entry : stored) {
    const std::string& name = entry->first;
    const ImatrixEntry& e = entry->second;
    put<std::int32_t>(out, static_cast<std::int32_t>(name.size()));
    out += name;
    const std::int64_t max_count = *std::max_element(e.counts.begin(), e.counts.end());
    const std::int32_t ncall = static_cast<std::int32_t>((max_count + (m.chunk_size - 1)) / m.chunk_size);
    put<std::int32_t>(out, ncall);
    const std::int32_t nval = static_cast<std::int32_t>(e.sums.size());
    const std::int32_t nmat = static_cast<std::int32_t>(e.counts.size());
    put<std::int32_t>(out, nval);
    for (std::int32_t i = 0; i < nval; ++i) {
      float count = static_cast<float>(e.counts[static_cast<std::size_t>(i / (nval / nmat))]);
      float value = e.sums[static_cast<std::size_t>(i)];
      if (count == 0.0f) {  // a matrix that saw no token stores 1
        value = 1.0f;
        count = 1.0f;
      }
      put<float>(out, (value / count) * static_cast<float>(ncall));
    }
  }
  put<std::int32_t>(out, m.chunk_count);
  const std::string dataset = m.datasets.empty() ? std::string() : m.datasets.back();
  put<std::int32_t>(out, static_cast<std::int32_t>(dataset.size()));
  out += dataset;
  write_file_atomic(path, out);
}

const GgmlImportanceEntry* GgmlImportance::find(const std::string& name) const {
  const auto it = entries.find(name);
  return it == entries.end() ? nullptr : &it->second;
}

at::Tensor GgmlImportance::tensor_for(const std::string& name, std::int64_t experts, std::int64_t columns) const {
  const GgmlImportanceEntry* e = find(name);
  if (e == nullptr) return at::Tensor();
  QEVAL_CHECK(static_cast<std::int64_t>(e->values.size()) == experts * columns,
              "{}: imatrix entry {} has {} values, the tensor needs {} ({} columns × {} experts)", source.string(),
              name, e->values.size(), experts * columns, columns, experts);
  return at::from_blob(const_cast<float*>(e->values.data()), {experts, columns}, at::kFloat).clone();
}

GgmlImportance ggml_importance(const Imatrix& m, const fs::path& source) {
  QEVAL_CHECK(m.legacy || m.has_metadata,
              "{}: missing imatrix metadata: a GGUF imatrix needs {}, {} and {} (llama-quantize refuses it too)",
              source.string(), kDatasets, kChunkCount, kChunkSize);
  GgmlImportance out;
  out.datasets = m.datasets;
  out.chunk_count = m.chunk_count;
  out.source = source;
  for (const auto& [name, entry] : m.entries) {
    GgmlImportanceEntry& e = out.entries[name];
    e.counts = entry.counts;
    e.values.resize(entry.sums.size());
    if (!m.legacy) {  // per matrix: sum / count, or 1 where the matrix saw no token
      const std::int64_t ncounts = entry.matrices();
      QEVAL_CHECK(ncounts >= 1 && static_cast<std::int64_t>(entry.sums.size()) % ncounts == 0,
                  "{}: imatrix entry {} has {} sums for {} counts", source.string(), name, entry.sums.size(), ncounts);
      const std::int64_t ne0 = static_cast<std::int64_t>(entry.sums.size()) / ncounts;
      e.columns = ne0;
      for (std::int64_t j = 0; j < ncounts; ++j) {
        const float count = static_cast<float>(entry.counts[static_cast<std::size_t>(j)]);
        for (std::int64_t i = 0; i < ne0; ++i)
          e.values[static_cast<std::size_t>(j * ne0 + i)] =
              count > 0.0f ? entry.sums[static_cast<std::size_t>(j * ne0 + i)] / count : 1.0f;
      }
    } else {  // value / ncall (float32 / int64, as C converts), or the values as stored for ncall <= 0
      const std::int64_t ncall = entry.counts.empty() ? 0 : entry.counts[0];
      e.columns = static_cast<std::int64_t>(entry.sums.size());
      for (std::size_t i = 0; i < entry.sums.size(); ++i)
        e.values[i] = ncall > 0 ? entry.sums[i] / static_cast<float>(ncall) : entry.sums[i];
    }
    for (std::size_t i = 0; i < e.values.size(); ++i) {
      QEVAL_CHECK(std::isfinite(e.values[i]),
                  "{}: imatrix entry {}: importance {} at index {} is not finite (llama-quantize refuses it)",
                  source.string(), name, e.values[i], i);
      // Σ x² is never negative: a negative weight is a corrupt file, and would turn ggml's weighted
      // least squares into a search for the worst scale.
      QEVAL_CHECK(e.values[i] >= 0.0f,
                  "{}: imatrix entry {}: importance {} at index {} is negative; expected a sum of squared activations (>= 0)",
                  source.string(), name, e.values[i], i);
    }
  }
  return out;
}

GgmlImportance read_ggml_importance(const fs::path& path) { return ggml_importance(read_imatrix(path), path); }

}  // namespace qeval

#include "loaders/checkpoints/safetensors_set.h"

#include <fmt/format.h>

#include "common/error.h"
#include "loaders/checkpoints/checkpoint_internal.h"

namespace qeval {

namespace fs = std::filesystem;

void SafetensorsSet::add(const fs::path& file) {
  files_.push_back(std::make_unique<SafetensorsFile>(file));
  const std::size_t index = files_.size() - 1;
  for (const auto& name : files_.back()->names()) {
    auto [it, inserted] = where_.emplace(name, index);
    QEVAL_CHECK(inserted, "{}: tensor {} appears in both {} and {}; expected each tensor in exactly one file", source_,
                name, files_[it->second]->path().filename().string(), file.filename().string());
  }
}

std::vector<fs::path> SafetensorsSet::paths() const {
  std::vector<fs::path> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

const SafetensorsFile& SafetensorsSet::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    std::string looked;
    for (const auto& f : files_) looked += (looked.empty() ? "" : ", ") + f->path().filename().string();
    fail("{}: missing tensor {} (looked in {})", source_, name, looked);
  }
  return *files_[it->second];
}

at::Tensor SafetensorsSet::take(const std::string& name, const std::vector<std::int64_t>& shape) {
  if (!has(name)) {
    std::string looked;
    for (const auto& f : files_) looked += (looked.empty() ? "" : ", ") + f->path().filename().string();
    fail("{}: missing tensor {} (expected shape {}; looked in {})", source_, name, shape_string(shape), looked);
  }
  if (header_only_) {
    const SafetensorsFile& file = file_of(name);
    const SafetensorsTensorInfo& entry = file.info(name);
    QEVAL_CHECK(entry.shape == shape, "{}: tensor {} has shape {}, expected {}", file.path().string(), name,
                shape_string(entry.shape), shape_string(shape));
    QEVAL_CHECK(at::isFloatingType(entry.scalar_type),
                "{}: tensor {} has dtype {}, expected a floating-point dtype (F32, F16, BF16 or F64)",
                file.path().string(), name, entry.dtype);
    used_.insert(name);
    if (taken_) taken_->push_back(name);
    return at::empty(shape, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  }
  at::Tensor t = file_of(name).read_float32(name, shape);
  used_.insert(name);
  return t;
}

at::Tensor SafetensorsSet::take_stored(const std::string& name) {
  const SafetensorsFile& file = file_of(name);
  used_.insert(name);
  if (header_only_) {
    if (taken_) taken_->push_back(name);
    const SafetensorsTensorInfo& entry = file.info(name);
    return at::empty(entry.shape, at::TensorOptions().dtype(entry.scalar_type).device(at::kMeta));
  }
  return file.read(name);
}

at::Tensor SafetensorsSet::take_rows(const std::string& name, const std::vector<std::int64_t>& shape, std::int64_t begin,
                                     std::int64_t count) {
  const SafetensorsFile& file = file_of(name);
  QEVAL_CHECK(file.info(name).shape == shape, "{}: tensor {} has shape {}, expected {}", file.path().string(), name,
              shape_string(file.info(name).shape), shape_string(shape));
  used_.insert(name);
  if (header_only_) {
    std::vector<std::int64_t> rows = shape;
    rows[0] = count;
    return at::empty(rows, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  }
  return file.read_float32_rows(name, begin, count);
}

std::vector<FileSpan> SafetensorsSet::spans_taken_by(const std::function<void()>& reads) {
  std::vector<std::string> names;
  struct Restore {  // header-only mode and the record end with the call, also when `reads` throws
    SafetensorsSet& set;
    bool header_only;
    ~Restore() {
      set.header_only_ = header_only;
      set.taken_ = nullptr;
    }
  } restore{*this, header_only_};
  header_only_ = true;
  taken_ = &names;
  reads();
  std::vector<FileSpan> spans;
  for (const auto& name : names) {
    const SafetensorsFile& file = file_of(name);
    const SafetensorsTensorInfo& entry = file.info(name);
    spans.push_back({file.path(), file.data_start() + entry.begin, entry.end - entry.begin});
  }
  return spans;
}

std::int64_t SafetensorsSet::stored_bytes() const {
  std::int64_t total = 0;
  for (const auto& f : files_)
    for (const auto& name : f->names()) total += static_cast<std::int64_t>(f->info(name).end - f->info(name).begin);
  return total;
}

std::vector<std::string> SafetensorsSet::unused() const {
  std::vector<std::string> out;
  for (const auto& f : files_)
    for (const auto& name : f->names())
      if (!used_.count(name)) out.push_back(name);
  return out;
}

void SafetensorsSet::hash_reads_into(const std::shared_ptr<TensorHashes>& hashes) {
  for (auto& f : files_) f->hash_reads_into(hashes);
}

SafetensorsSet open_safetensors_folder(const fs::path& dir) {
  SafetensorsSet set(dir.string());
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  if (fs::exists(index_path)) {
    const std::string index_name = index_path.string();
    nlohmann::json index = read_json_file(index_path);
    QEVAL_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                "{}: expected an object with a \"weight_map\" object (tensor name → shard file)", index_name);
    std::map<std::string, std::string> weight_map;  // tensor → shard
    std::set<std::string> shards;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      QEVAL_CHECK(shard.is_string(), "{}: weight_map entry {} should name a shard file, found {}", index_name, name,
                  shard.dump());
      const std::string s = shard.get<std::string>();
      // Shards live beside the index; a path that leaves the folder is not a shard, and a name
      // longer than a file name can be (255 bytes) would make the file system calls below throw.
      QEVAL_CHECK(!s.empty() && s.size() <= 255 && s.find('/') == std::string::npos && s.find('\0') == std::string::npos &&
                      s != "..",
                  "{}: weight_map entry {} names shard \"{}\", expected a file name in the same folder", index_name,
                  name, s);
      weight_map[name] = s;
      shards.insert(s);
    }
    QEVAL_CHECK(!shards.empty(), "{}: weight_map is empty", index_name);
    for (const auto& s : shards) {
      std::error_code error;  // the non-throwing form: a file system error means "not a usable shard"
      QEVAL_CHECK(fs::is_regular_file(dir / s, error), "{}: shard {} listed in the index does not exist{}", index_name, s,
                  error ? " (" + error.message() + ")" : std::string());
    }
    for (const auto& s : shards) set.add(dir / s);
    for (const auto& [name, shard] : weight_map) {
      QEVAL_CHECK(set.has(name), "{}: the index puts tensor {} in {}, but no shard holds it", index_name, name, shard);
      const std::string holder = set.file_of(name).path().filename().string();
      QEVAL_CHECK(holder == shard, "{}: the index puts tensor {} in {}, but it is in {}", index_name, name, shard,
                  holder);
    }
    for (const auto& f : set.files())
      for (const auto& name : f->names())
        QEVAL_CHECK(weight_map.count(name), "{}: tensor {} in shard {} is not listed in the index", index_name, name,
                    f->path().filename().string());
    return set;
  }
  if (fs::exists(single)) {
    set.add(single);
    return set;
  }
  std::string found;
  if (fs::exists(dir / "pytorch_model.bin")) found = "; found pytorch_model.bin (torch.save weights are not supported: convert to safetensors)";
  fail("{}: no weights found; expected model.safetensors or model.safetensors.index.json with its shards{}", dir.string(),
       found);
}

}  // namespace qeval

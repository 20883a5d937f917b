// A minimal GGUF writer following the format description (not qeval's reader), for tests that
// build GGUF files from tensors they hold.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace qeval::test {

class GgufBuilder {
 public:
  template <typename T>
  static std::string pod(T v) {
    std::string s(sizeof(T), '\0');
    std::memcpy(s.data(), &v, sizeof(T));
    return s;
  }
  static std::string str(const std::string& s) { return pod<std::uint64_t>(s.size()) + s; }

  void u32(const std::string& key, std::uint32_t v) { kv(key, 4, pod(v)); }
  void f32(const std::string& key, float v) { kv(key, 6, pod(v)); }
  void string(const std::string& key, const std::string& v) { kv(key, 8, str(v)); }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    std::string value = pod<std::uint32_t>(8) + pod<std::uint64_t>(v.size());
    for (const auto& s : v) value += str(s);
    kv(key, 9, value);
  }
  // `t`: row-major [out, in] or [n]; stored with ne reversed, as F32 (type 0) or F16 (type 1).
  void tensor(const std::string& name, const at::Tensor& t, std::uint32_t type) {
    at::Tensor data = (type == 1 ? t.to(at::kHalf) : t.to(at::kFloat)).contiguous();
    raw_tensor(name, t.sizes().vec(), type,
               std::string(static_cast<const char*>(data.data_ptr()), data.numel() * data.element_size()));
  }
  // Already encoded data of any type, shape row-major.
  void raw_tensor(const std::string& name, const std::vector<std::int64_t>& shape, std::uint32_t type,
                  const std::string& bytes) {
    std::string info = str(name) + pod<std::uint32_t>(static_cast<std::uint32_t>(shape.size()));
    for (auto d = shape.rbegin(); d != shape.rend(); ++d) info += pod<std::uint64_t>(static_cast<std::uint64_t>(*d));
    info += pod<std::uint32_t>(type) + pod<std::uint64_t>(data_.size());
    infos_ += info;
    data_ += bytes;
    data_.append((alignment_ - data_.size() % alignment_) % alignment_, '\0');
    ++n_tensors_;
  }
  void alignment(std::uint32_t a) {
    alignment_ = a;
    u32("general.alignment", a);
  }
  std::string build() const {
    std::string out = "GGUF" + pod<std::uint32_t>(3) + pod<std::uint64_t>(n_tensors_) + pod<std::uint64_t>(n_kv_) + kvs_ + infos_;
    out.append((alignment_ - out.size() % alignment_) % alignment_, '\0');
    return out + data_;
  }

 private:
  void kv(const std::string& key, std::uint32_t type, const std::string& value) {
    kvs_ += str(key) + pod(type) + value;
    ++n_kv_;
  }
  std::string kvs_, infos_, data_;
  std::uint64_t n_kv_ = 0, n_tensors_ = 0, alignment_ = 32;
};

}  // namespace qeval::test

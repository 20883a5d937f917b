#include "loaders/checkpoints/zip_directory.h"

#include <algorithm>
#include <fstream>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace qeval {
namespace {

constexpr std::uint32_t kEndOfDirectory = 0x06054b50, kZip64EndOfDirectory = 0x06064b50,
                        kZip64Locator = 0x07064b50, kDirectoryEntry = 0x02014b50;
constexpr std::size_t kEndOfDirectorySize = 22, kZip64LocatorSize = 20, kZip64EndSize = 56, kEntrySize = 46;
constexpr std::size_t kMaxComment = 0xffff;

std::uint64_t le(std::string_view b, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

class FileBytes {
 public:
  FileBytes(const std::filesystem::path& file, std::string source)
      : in_(file, std::ios::binary), source_(std::move(source)) {
    QEVAL_CHECK(in_.good(), "{}: cannot open", source_);
    in_.seekg(0, std::ios::end);
    size_ = static_cast<std::uint64_t>(in_.tellg());
  }
  std::uint64_t size() const { return size_; }
  // `n` bytes at `offset`, which must lie inside the file.
  std::string read(std::uint64_t offset, std::uint64_t n, const char* what) {
    QEVAL_CHECK(offset <= size_ && n <= size_ - offset, "{}: zip {} at byte {} ({} bytes) lies outside the {}-byte file",
                source_, what, offset, n, size_);
    std::string out(n, '\0');
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(out.data(), static_cast<std::streamsize>(n));
    QEVAL_CHECK(static_cast<std::uint64_t>(in_.gcount()) == n, "{}: short read of the zip {}", source_, what);
    return out;
  }

 private:
  std::ifstream in_;
  std::string source_;
  std::uint64_t size_ = 0;
};

}  // namespace

std::vector<ZipRecord> zip_directory(const std::filesystem::path& file) {
  const std::string source = file.string();
  FileBytes bytes(file, source);
  QEVAL_CHECK(bytes.size() >= kEndOfDirectorySize, "{}: {} bytes is too short for a zip archive", source, bytes.size());

  // The end-of-central-directory record: the last signature within the final 22 + 65535 bytes.
  const std::uint64_t tail_start = bytes.size() - std::min<std::uint64_t>(bytes.size(), kEndOfDirectorySize + kMaxComment);
  const std::string tail = bytes.read(tail_start, bytes.size() - tail_start, "end of central directory");
  std::size_t eocd = std::string::npos;
  for (std::size_t i = tail.size() - kEndOfDirectorySize + 1; i-- > 0;)
    if (le(tail, i, 4) == kEndOfDirectory) {
      eocd = i;
      break;
    }
  QEVAL_CHECK(eocd != std::string::npos, "{}: no zip end-of-central-directory record (truncated or corrupt?)", source);
  std::uint64_t entries = le(tail, eocd + 10, 2), directory_size = le(tail, eocd + 12, 4),
                directory_offset = le(tail, eocd + 16, 4);
  if (entries == 0xffff || directory_size == 0xffffffff || directory_offset == 0xffffffff) {
    const std::uint64_t eocd_at = tail_start + eocd;
    QEVAL_CHECK(eocd_at >= kZip64LocatorSize, "{}: zip64 archive without a zip64 locator", source);
    const std::string locator = bytes.read(eocd_at - kZip64LocatorSize, kZip64LocatorSize, "zip64 locator");
    QEVAL_CHECK(le(locator, 0, 4) == kZip64Locator, "{}: zip64 archive without a zip64 locator", source);
    const std::string end64 = bytes.read(le(locator, 8, 8), kZip64EndSize, "zip64 end of central directory");
    QEVAL_CHECK(le(end64, 0, 4) == kZip64EndOfDirectory, "{}: bad zip64 end-of-central-directory signature", source);
    entries = le(end64, 32, 8);
    directory_size = le(end64, 40, 8);
    directory_offset = le(end64, 48, 8);
  }
  // Each entry takes at least 46 bytes, so the count is bounded by the directory's size.
  QEVAL_CHECK(entries <= directory_size / kEntrySize, "{}: the zip directory claims {} records in {} bytes", source,
              entries, directory_size);
  const std::string dir = bytes.read(directory_offset, directory_size, "central directory");

  std::vector<ZipRecord> records;
  records.reserve(entries);
  std::size_t at = 0;
  for (std::uint64_t e = 0; e < entries; ++e) {
    QEVAL_CHECK(at + kEntrySize <= dir.size() && le(dir, at, 4) == kDirectoryEntry,
                "{}: zip central directory record {} is damaged", source, e);
    const std::size_t name_len = le(dir, at + 28, 2), extra_len = le(dir, at + 30, 2), comment_len = le(dir, at + 32, 2);
    QEVAL_CHECK(at + kEntrySize + name_len + extra_len + comment_len <= dir.size(),
                "{}: zip central directory record {} runs past the directory", source, e);
    std::uint64_t size = le(dir, at + 24, 4);
    if (size == 0xffffffff) {  // the zip64 extra field holds it (first of its 8-byte values)
      for (std::size_t x = at + kEntrySize + name_len, end = x + extra_len; x + 4 <= end;) {
        const std::size_t id = le(dir, x, 2), len = le(dir, x + 2, 2);
        if (x + 4 + len > end) break;
        if (id == 0x0001 && len >= 8) size = le(dir, x + 4, 8);
        x += 4 + len;
      }
    }
    records.push_back({dir.substr(at + kEntrySize, name_len), size});
    at += kEntrySize + name_len + extra_len + comment_len;
  }
  return records;
}

}  // namespace qeval

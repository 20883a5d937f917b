// Byte streams over data files, decompressed on the fly, and a line reader over them.
//
// Compression is chosen by the file name: `.gz` is gzip (zlib inflate; gzip or zlib headers
// are detected automatically, and concatenated gzip members are read one after another, as
// `gzip -d` does), `.zst` is zstd (ZSTD_decompressStream; concatenated frames are read in
// turn), `.bz2` is bzip2 (BZ2_bzDecompress; concatenated streams are read in turn, as
// `bzip2 -d` does), anything else is read as it is. Every stream reads fixed-size chunks, so memory does
// not depend on the size of the file. Corrupt or truncated compressed data throws qeval::Error
// naming the file, the compressed byte offset and what zlib, zstd or libbz2 said; bytes after the last
// gzip member that are not another member (zero padding, say) count as corrupt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace qeval {

enum class Compression { none, gzip, zstd, bzip2 };

// From the last extension: ".gz" -> gzip, ".zst" -> zstd, ".bz2" -> bzip2, otherwise none
// (case-insensitive).
Compression compression_from_name(const std::filesystem::path& path);
std::string to_string(Compression compression);  // "none", "gz", "zst", "bz2"

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Fills up to `size` bytes of decompressed data; returns how many, 0 only at the end.
  virtual std::size_t read(char* buffer, std::size_t size) = 0;
  virtual Compression compression() const = 0;
  const std::filesystem::path& path() const { return path_; }

 protected:
  explicit ByteStream(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

// Opens `path` with the given compression (compression_from_name by default).
std::unique_ptr<ByteStream> open_byte_stream(const std::filesystem::path& path);
std::unique_ptr<ByteStream> open_byte_stream(const std::filesystem::path& path, Compression compression);

// Splits a byte stream at '\n'. The '\n' is not part of the line; everything else, '\r'
// included, is kept. A last line without '\n' is still a line; a file ending in '\n' has no
// empty line after it. A line longer than max_line_bytes throws (a limit, not an allocation
// failure), naming the file and the line number.
class LineReader {
 public:
  static constexpr std::size_t kDefaultBufferBytes = 1 << 20;

  LineReader(std::unique_ptr<ByteStream> stream, std::size_t max_line_bytes,
             std::size_t buffer_bytes = kDefaultBufferBytes);

  // The next line into `line` (its capacity is reused); false at the end.
  bool next(std::string& line);
  // 1-based number of the line last returned by next().
  std::uint64_t line_number() const { return line_number_; }
  const ByteStream& stream() const { return *stream_; }

 private:
  bool refill();

  std::unique_ptr<ByteStream> stream_;
  std::size_t max_line_bytes_;
  // Starts at kInitialBufferBytes and doubles up to max_buffer_bytes_ while reads fill it, so a
  // small file never pays for a megabyte buffer (that cost dominated opening small files).
  static constexpr std::size_t kInitialBufferBytes = 16 << 10;
  std::unique_ptr<char[]> buffer_;
  std::size_t buffer_bytes_;
  std::size_t max_buffer_bytes_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  bool at_end_ = false;
  std::uint64_t line_number_ = 0;
};

// True for a line that is empty or only spaces, tabs and '\r' (a separator in text files).
bool is_blank_line(const std::string& line);

// Reads a whole stream (the one non-streamed use: a text file as a single document).
// Throws when it holds more than max_bytes.
std::string read_all(ByteStream& stream, std::size_t max_bytes);

}  // namespace qeval

#include "loaders/text/compressed_stream.h"

#include <bzlib.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace qeval {
namespace {

// Compressed input is read in chunks of this size; zlib and zstd keep their own windows
// (32 KiB for deflate, up to the frame's window for zstd) on top of it.
constexpr std::size_t kInputChunkBytes = 256 << 10;

// zstd frames may ask for windows up to 3.75 TiB, and the decoder allocates what the frame
// header asks for: a 3 KB file claiming a 2 GiB window made a 2 GiB allocation (found by
// fuzz_jsonl_zst). The limit is the zstd CLI's default decoder limit, 128 MiB (window log 27):
// what `zstd` writes without --long, and what `zstd -d` itself accepts without --memory.
constexpr int kMaxZstdWindowLog = 27;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

FilePtr open_file(const std::filesystem::path& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) fail("cannot open data file {}: {}", path.string(), std::strerror(errno));
  return f;
}

// Reads up to `size` bytes; 0 only at end of file.
std::size_t read_file_chunk(std::FILE* f, const std::filesystem::path& path, char* buffer, std::size_t size) {
  std::size_t n = std::fread(buffer, 1, size, f);
  if (n < size && std::ferror(f)) fail("error reading data file {}: {}", path.string(), std::strerror(errno));
  return n;
}

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(const std::filesystem::path& path) : ByteStream(path), file_(open_file(path)) {}
  std::size_t read(char* buffer, std::size_t size) override {
    return read_file_chunk(file_.get(), path_, buffer, size);
  }
  Compression compression() const override { return Compression::none; }

 private:
  FilePtr file_;
};

// Shared by the decoders: the compressed input buffer and how far into the file it is.
class CompressedInput {
 public:
  explicit CompressedInput(const std::filesystem::path& path)
      : file_(open_file(path)), chunk_bytes_(chunk_bytes_for(path)), chunk_(new char[chunk_bytes_]) {}
  // Reads the next chunk; returns its size, 0 at end of file.
  std::size_t refill(const std::filesystem::path& path) {
    std::size_t n = read_file_chunk(file_.get(), path, chunk_.get(), chunk_bytes_);
    consumed_before_chunk_ = file_offset_;
    file_offset_ += n;
    at_eof_ = n == 0;
    return n;
  }
  char* data() { return chunk_.get(); }
  bool at_eof() const { return at_eof_; }
  // File offset of byte `pos` of the current chunk.
  std::uint64_t offset(std::size_t pos) const { return consumed_before_chunk_ + pos; }
  std::uint64_t file_size_so_far() const { return file_offset_; }

 private:
  // kInputChunkBytes, or the file's size when smaller (a small file does not pay for the buffer).
  static std::size_t chunk_bytes_for(const std::filesystem::path& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    return ec ? kInputChunkBytes : static_cast<std::size_t>(std::clamp<std::uintmax_t>(size, 1, kInputChunkBytes));
  }

  FilePtr file_;
  std::size_t chunk_bytes_;
  std::unique_ptr<char[]> chunk_;
  std::uint64_t file_offset_ = 0;
  std::uint64_t consumed_before_chunk_ = 0;
  bool at_eof_ = false;
};

class GzipStream final : public ByteStream {
 public:
  explicit GzipStream(const std::filesystem::path& path) : ByteStream(path), input_(path) {
    std::memset(&z_, 0, sizeof(z_));
    // 15 + 32: the largest window, and detect a gzip or zlib header by itself.
    if (inflateInit2(&z_, 15 + 32) != Z_OK) fail("zlib inflateInit2 failed for {}", path.string());
  }
  ~GzipStream() override { inflateEnd(&z_); }

  std::size_t read(char* buffer, std::size_t size) override {
    z_.next_out = reinterpret_cast<Bytef*>(buffer);
    z_.avail_out = static_cast<uInt>(std::min<std::size_t>(size, 1u << 30));
    const uInt want = z_.avail_out;
    while (z_.avail_out > 0) {
      if (z_.avail_in == 0 && !input_.at_eof()) {
        z_.avail_in = static_cast<uInt>(input_.refill(path_));
        z_.next_in = reinterpret_cast<Bytef*>(input_.data());
        chunk_size_ = z_.avail_in;
      }
      if (member_done_) {
        if (z_.avail_in == 0) break;  // the end, after a complete member
        inflateReset(&z_);            // concatenated gzip: the next member starts here
        member_done_ = false;
      }
      const uInt out_before = z_.avail_out;
      int ret = inflate(&z_, Z_NO_FLUSH);
      if (ret == Z_STREAM_END) {
        member_done_ = true;
        continue;
      }
      if (ret == Z_BUF_ERROR && z_.avail_in == 0 && input_.at_eof() && z_.avail_out == out_before) {
        fail(
            "truncated gzip data in {}: the file ends at byte {} inside a gzip member "
            "(the decompressed data so far is {} bytes)",
            path_.string(), input_.file_size_so_far(), total_out_ + (want - z_.avail_out));
      }
      if (ret != Z_OK && ret != Z_BUF_ERROR) {
        fail(
            "corrupt gzip data in {} at compressed byte offset {} (after {} decompressed bytes): zlib says \"{}\" "
            "(code {})",
            path_.string(), input_.offset(chunk_size_ - z_.avail_in), total_out_ + (want - z_.avail_out),
            z_.msg ? z_.msg : "no message", ret);
      }
    }
    total_out_ += want - z_.avail_out;
    return want - z_.avail_out;
  }
  Compression compression() const override { return Compression::gzip; }

 private:
  CompressedInput input_;
  z_stream z_;
  std::size_t chunk_size_ = 0;
  std::uint64_t total_out_ = 0;  // zlib's own count restarts with each member
  bool member_done_ = false;
};

class ZstdStream final : public ByteStream {
 public:
  explicit ZstdStream(const std::filesystem::path& path) : ByteStream(path), input_(path) {
    ctx_ = ZSTD_createDStream();
    if (!ctx_) fail("ZSTD_createDStream failed for {}", path.string());
    ZSTD_DCtx_setParameter(ctx_, ZSTD_d_windowLogMax, kMaxZstdWindowLog);
  }
  ~ZstdStream() override { ZSTD_freeDStream(ctx_); }

  std::size_t read(char* buffer, std::size_t size) override {
    ZSTD_outBuffer out{buffer, size, 0};
    while (out.pos < out.size) {
      if (in_.pos == in_.size && !input_.at_eof()) {
        in_ = ZSTD_inBuffer{input_.data(), input_.refill(path_), 0};
      }
      // After a complete frame with no input left, the stream is over; with input left,
      // another frame follows and zstd starts it by itself.
      if (in_.pos == in_.size && input_.at_eof() && frame_done_) break;
      const std::size_t out_before = out.pos;
      std::size_t ret = ZSTD_decompressStream(ctx_, &out, &in_);
      if (ZSTD_isError(ret) && ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge) {
        fail("{}: a zstd frame within compressed bytes {}..{} asks for a window larger than {} MiB, qeval's limit "
             "(zstd's default; files written with --long=28 or more exceed it): decompress and recompress it without "
             "--long",
             path_.string(), input_.offset(in_.pos), input_.offset(in_.size), (1u << kMaxZstdWindowLog) >> 20);
      }
      if (ZSTD_isError(ret)) {
        // zstd decodes whole blocks, so the damage lies somewhere in the chunk it was given.
        fail("corrupt zstd data in {} within compressed bytes {}..{} (after {} decompressed bytes): zstd says \"{}\"",
             path_.string(), input_.offset(in_.pos), input_.offset(in_.size), total_out_ + out.pos,
             ZSTD_getErrorName(ret));
      }
      frame_done_ = ret == 0;
      if (!frame_done_ && in_.pos == in_.size && input_.at_eof() && out.pos == out_before) {
        fail("truncated zstd data in {}: the file ends at byte {} inside a zstd frame", path_.string(),
             input_.file_size_so_far());
      }
    }
    total_out_ += out.pos;
    return out.pos;
  }
  Compression compression() const override { return Compression::zstd; }

 private:
  CompressedInput input_;
  ZSTD_DStream* ctx_ = nullptr;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  std::uint64_t total_out_ = 0;
  bool frame_done_ = false;  // false at the start, so an empty file counts as truncated
};

// bzip2 (libbz2's BZ2_bzDecompress): concatenated streams are read one after another, as
// `bzip2 -d` does (pbzip2 writes one stream per block group). bzip2 checks a CRC per block and
// per stream, so damage is found where it is, not only at the end.
class Bzip2Stream final : public ByteStream {
 public:
  explicit Bzip2Stream(const std::filesystem::path& path) : ByteStream(path), input_(path) { init(); }
  ~Bzip2Stream() override { BZ2_bzDecompressEnd(&bz_); }

  std::size_t read(char* buffer, std::size_t size) override {
    bz_.next_out = buffer;
    bz_.avail_out = static_cast<unsigned>(std::min<std::size_t>(size, 1u << 30));
    const unsigned want = bz_.avail_out;
    while (bz_.avail_out > 0) {
      if (bz_.avail_in == 0 && !input_.at_eof()) {
        bz_.avail_in = static_cast<unsigned>(input_.refill(path_));
        bz_.next_in = input_.data();
        chunk_size_ = bz_.avail_in;
      }
      if (stream_done_) {
        if (bz_.avail_in == 0) break;  // the end, after a complete stream
        // Concatenated bzip2: the next stream starts here. End and Init leave next_in / next_out
        // and their counts as they are.
        BZ2_bzDecompressEnd(&bz_);
        if (BZ2_bzDecompressInit(&bz_, 0, 0) != BZ_OK) fail("libbz2 BZ2_bzDecompressInit failed for {}", path_.string());
        stream_done_ = false;
      }
      const unsigned out_before = bz_.avail_out;
      const int ret = BZ2_bzDecompress(&bz_);
      if (ret == BZ_STREAM_END) {
        stream_done_ = true;
        continue;
      }
      if (ret != BZ_OK) {
        fail("corrupt bzip2 data in {} at compressed byte offset {} (after {} decompressed bytes): libbz2 says {}",
             path_.string(), input_.offset(chunk_size_ - bz_.avail_in), total_out_ + (want - bz_.avail_out),
             error_name(ret));
      }
      if (bz_.avail_in == 0 && input_.at_eof() && bz_.avail_out == out_before) {
        fail("truncated bzip2 data in {}: the file ends at byte {} inside a bzip2 stream (the decompressed data so "
             "far is {} bytes)",
             path_.string(), input_.file_size_so_far(), total_out_ + (want - bz_.avail_out));
      }
    }
    total_out_ += want - bz_.avail_out;
    return want - bz_.avail_out;
  }
  Compression compression() const override { return Compression::bzip2; }

 private:
  void init() {
    std::memset(&bz_, 0, sizeof(bz_));  // bzalloc, bzfree and opaque null: libbz2's malloc and free
    if (BZ2_bzDecompressInit(&bz_, 0, 0) != BZ_OK) fail("libbz2 BZ2_bzDecompressInit failed for {}", path_.string());
  }
  static const char* error_name(int code) {
    switch (code) {
      case BZ_DATA_ERROR: return "BZ_DATA_ERROR (a block's or the stream's CRC does not match, or the data is not bzip2)";
      case BZ_DATA_ERROR_MAGIC: return "BZ_DATA_ERROR_MAGIC (no bzip2 stream header: not bzip2 data)";
      case BZ_MEM_ERROR: return "BZ_MEM_ERROR (out of memory)";
      case BZ_PARAM_ERROR: return "BZ_PARAM_ERROR";
      default: return "an unknown error";
    }
  }

  CompressedInput input_;
  bz_stream bz_;
  std::size_t chunk_size_ = 0;
  std::uint64_t total_out_ = 0;
  bool stream_done_ = false;  // false at the start, so an empty file counts as truncated
};

}  // namespace

Compression compression_from_name(const std::filesystem::path& path) {
  const std::string ext = lower(path.extension().string());
  if (ext == ".gz") return Compression::gzip;
  if (ext == ".zst") return Compression::zstd;
  if (ext == ".bz2") return Compression::bzip2;
  return Compression::none;
}

std::string to_string(Compression compression) {
  switch (compression) {
    case Compression::none:
      return "none";
    case Compression::gzip:
      return "gz";
    case Compression::zstd:
      return "zst";
    case Compression::bzip2:
      return "bz2";
  }
  return "?";
}

std::unique_ptr<ByteStream> open_byte_stream(const std::filesystem::path& path) {
  return open_byte_stream(path, compression_from_name(path));
}

std::unique_ptr<ByteStream> open_byte_stream(const std::filesystem::path& path, Compression compression) {
  switch (compression) {
    case Compression::none:
      return std::make_unique<PlainStream>(path);
    case Compression::gzip:
      return std::make_unique<GzipStream>(path);
    case Compression::zstd:
      return std::make_unique<ZstdStream>(path);
    case Compression::bzip2:
      return std::make_unique<Bzip2Stream>(path);
  }
  fail("open_byte_stream: unknown compression for {}", path.string());
}

LineReader::LineReader(std::unique_ptr<ByteStream> stream, std::size_t max_line_bytes, std::size_t buffer_bytes)
    : stream_(std::move(stream)),
      max_line_bytes_(max_line_bytes),
      buffer_bytes_(std::clamp<std::size_t>(kInitialBufferBytes, 1, std::max<std::size_t>(buffer_bytes, 1))),
      max_buffer_bytes_(std::max<std::size_t>(buffer_bytes, 1)) {
  buffer_.reset(new char[buffer_bytes_]);
}

bool LineReader::refill() {
  if (at_end_) return false;
  if (end_ == buffer_bytes_ && buffer_bytes_ < max_buffer_bytes_) {  // the last read filled it: grow
    buffer_bytes_ = std::min(2 * buffer_bytes_, max_buffer_bytes_);
    buffer_.reset(new char[buffer_bytes_]);  // everything in it was consumed (begin_ == end_)
  }
  begin_ = 0;
  end_ = stream_->read(buffer_.get(), buffer_bytes_);
  at_end_ = end_ == 0;
  return !at_end_;
}

bool LineReader::next(std::string& line) {
  line.clear();
  bool any = false;  // a last line without '\n' still counts
  for (;;) {
    if (begin_ == end_ && !refill()) {
      if (any) ++line_number_;
      return any;
    }
    any = true;
    const char* start = buffer_.get() + begin_;
    const auto* nl = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
    const std::size_t take = nl ? static_cast<std::size_t>(nl - start) : end_ - begin_;
    if (line.size() + take > max_line_bytes_) {
      fail("line {} of {} is longer than the limit of {} bytes (is this a text file? the limit bounds memory)",
           line_number_ + 1, stream_->path().string(), max_line_bytes_);
    }
    line.append(start, take);
    begin_ += take;
    if (nl) {
      ++begin_;
      ++line_number_;
      return true;
    }
  }
}

bool is_blank_line(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

std::string read_all(ByteStream& stream, std::size_t max_bytes) {
  std::string all;
  constexpr std::size_t kChunkBytes = 64 << 10;
  const std::unique_ptr<char[]> chunk(new char[kChunkBytes]);
  while (std::size_t n = stream.read(chunk.get(), kChunkBytes)) {
    if (all.size() + n > max_bytes) {
      fail("{} holds more than {} bytes, the limit for reading it whole (split it by paragraph or line to stream it)",
           stream.path().string(), max_bytes);
    }
    all.append(chunk.get(), n);
  }
  return all;
}

}  // namespace qeval

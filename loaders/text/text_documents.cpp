// Plain-text documents: paragraph, line or whole-file splitting (the rule is in documents.h).
#include <fmt/format.h>

#include <utility>

#include "common/error.h"
#include "loaders/text/compressed_stream.h"
#include "loaders/text/documents.h"

namespace qeval {
namespace {

std::string format_name(const ByteStream& stream) {
  return stream.compression() == Compression::none ? "text" : "text." + to_string(stream.compression());
}

class TextDocuments final : public DocumentReader {
 public:
  TextDocuments(const std::filesystem::path& path, const DocumentOptions& options)
      : split_(options.text_split), max_bytes_(options.max_document_bytes), path_(path) {
    auto stream = open_byte_stream(path);
    format_ = format_name(*stream);
    if (split_ == TextSplit::file) {
      whole_ = std::move(stream);
    } else {
      lines_.emplace(std::move(stream), max_bytes_);
    }
  }

  std::optional<std::string> next() override {
    switch (split_) {
      case TextSplit::file:
        return next_file();
      case TextSplit::line:
        return next_line();
      case TextSplit::paragraph:
        return next_paragraph();
    }
    return std::nullopt;
  }

  std::string format() const override { return format_; }

 private:
  // Text has no NUL bytes; a file with one is binary (a checkpoint, a token file, zeros), and
  // tokenising it would only measure, or train on, noise.
  void refuse_binary(const std::string& text, std::uint64_t line) const {
    const auto nul = text.find('\0');
    if (nul == std::string::npos) return;
    fail("{}: {} holds a NUL byte (at byte {} of it): this is binary data, not text", path_.string(),
         line > 0 ? fmt::format("line {}", line) : std::string("the file"), nul);
  }

  std::optional<std::string> next_file() {
    if (!whole_) return std::nullopt;
    std::string all = read_all(*whole_, max_bytes_);
    whole_.reset();
    refuse_binary(all, 0);
    if (all.empty()) return std::nullopt;
    return all;
  }

  std::optional<std::string> next_line() {
    while (lines_->next(line_)) {
      refuse_binary(line_, lines_->line_number());
      if (!is_blank_line(line_)) return line_;
    }
    return std::nullopt;
  }

  std::optional<std::string> next_paragraph() {
    std::string doc;
    while (lines_->next(line_)) {
      refuse_binary(line_, lines_->line_number());
      if (is_blank_line(line_)) {
        if (doc.empty()) continue;  // leading blank lines, or a run of them
        return doc;
      }
      if (!doc.empty()) doc += '\n';
      if (doc.size() + line_.size() > max_bytes_) {
        fail("the paragraph ending at line {} of {} is longer than the limit of {} bytes (split by line instead?)",
             lines_->line_number(), lines_->stream().path().string(), max_bytes_);
      }
      doc += line_;
    }
    if (doc.empty()) return std::nullopt;
    return doc;
  }

  TextSplit split_;
  std::size_t max_bytes_;
  std::filesystem::path path_;
  std::string format_;
  std::unique_ptr<ByteStream> whole_;  // file mode only
  std::optional<LineReader> lines_;    // paragraph and line modes
  std::string line_;
};

}  // namespace

std::unique_ptr<DocumentReader> open_text_documents(const std::filesystem::path& path, const DocumentOptions& options) {
  return std::make_unique<TextDocuments>(path, options);
}

}  // namespace qeval

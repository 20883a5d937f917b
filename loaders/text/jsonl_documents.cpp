// JSON-lines documents: one JSON object per line, the document is one string field of it.
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "loaders/text/compressed_stream.h"
#include "loaders/text/documents.h"

namespace qeval {
namespace {

// Error messages quote the start of the offending line, not all of it (lines can be megabytes).
std::string excerpt(const std::string& line, std::size_t max_bytes = 80) {
  std::string head = line.substr(0, max_bytes);
  for (char& c : head) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return line.size() > max_bytes ? head + "..." : head;
}

std::string key_list(const nlohmann::json& object) {
  std::string keys;
  for (const auto& item : object.items()) {
    if (keys.size() > 200) return keys + ", ...";
    keys += keys.empty() ? "" : ", ";
    keys += "\"" + item.key() + "\"";
  }
  return keys.empty() ? "none" : keys;
}

class JsonlDocuments final : public DocumentReader {
 public:
  JsonlDocuments(const std::filesystem::path& path, const DocumentOptions& options)
      : field_(options.json_field), lines_(open_byte_stream(path), options.max_document_bytes) {
    const Compression c = lines_.stream().compression();
    format_ = c == Compression::none ? "jsonl" : "jsonl." + to_string(c);
  }

  std::optional<std::string> next() override {
    while (lines_.next(line_)) {
      if (is_blank_line(line_)) continue;
      return parse_line();
    }
    return std::nullopt;
  }

  std::string format() const override { return format_; }

 private:
  std::string where() const { return fmt::format("{} line {}", lines_.stream().path().string(), lines_.line_number()); }

  std::string parse_line() {
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line_);
    } catch (const nlohmann::json::exception& e) {
      // nlohmann quotes the whole token it choked on, which can be most of a long line.
      fail("{}: malformed JSON line, expected one JSON object per line ({}); the line starts with '{}'", where(),
           excerpt(e.what(), 240), excerpt(line_));
    }
    if (!row.is_object()) {
      fail("{}: expected a JSON object with a string field \"{}\", found a JSON {}: '{}'", where(), field_,
           row.type_name(), excerpt(line_));
    }
    auto it = row.find(field_);
    if (it == row.end()) {
      fail("{}: expected a string field \"{}\", found an object without it (keys: {})", where(), field_, key_list(row));
    }
    if (!it->is_string()) {
      fail("{}: expected field \"{}\" to be a string, found a JSON {}", where(), field_, it->type_name());
    }
    return it->get<std::string>();
  }

  std::string field_;
  LineReader lines_;
  std::string format_;
  std::string line_;
};

}  // namespace

std::unique_ptr<DocumentReader> open_jsonl_documents(const std::filesystem::path& path,
                                                     const DocumentOptions& options) {
  return std::make_unique<JsonlDocuments>(path, options);
}

}  // namespace qeval

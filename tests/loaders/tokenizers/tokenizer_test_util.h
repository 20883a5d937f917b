// Helpers shared by the tokenizer tests: id-sequence comparison that prints the first
// difference, text splitting, and running the Python oracles in tests/oracle/.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "loaders/tokenizers/tokenizer.h"
#include "tests/support/test_data.h"

namespace qeval::test {

// Passes when the sequences are equal; otherwise names the first differing index with both
// ids (and the decoded pieces around it when a tokenizer is given).
inline ::testing::AssertionResult ids_equal(const std::vector<std::int32_t>& got,
                                            const std::vector<std::int32_t>& expected,
                                            const Tokenizer* tok = nullptr) {
  if (got == expected) return ::testing::AssertionSuccess();
  std::size_t i = 0;
  while (i < got.size() && i < expected.size() && got[i] == expected[i]) ++i;
  auto at = [](const std::vector<std::int32_t>& v, std::size_t k) {
    return k < v.size() ? std::to_string(v[k]) : std::string("<end>");
  };
  auto context = [&](const std::vector<std::int32_t>& v) {
    if (tok == nullptr) return std::string();
    std::vector<std::int32_t> window(v.begin() + static_cast<std::ptrdiff_t>(std::min(i, v.size())),
                                     v.begin() + static_cast<std::ptrdiff_t>(std::min(i + 4, v.size())));
    try {
      return " '" + tok->decode(window) + "'";
    } catch (const std::exception&) {
      return std::string(" (undecodable)");
    }
  };
  return ::testing::AssertionFailure() << "first difference at index " << i << ": got " << at(got, i) << context(got)
                                       << ", expected " << at(expected, i) << context(expected) << " (lengths "
                                       << got.size() << " and " << expected.size() << ")";
}

// Paragraphs separated by blank lines ("\n\n"); empty ones dropped, inner single newlines kept.
inline std::vector<std::string> split_paragraphs(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    std::string p = text.substr(pos, end - pos);
    while (!p.empty() && p.front() == '\n') p.erase(p.begin());
    if (!p.empty()) out.push_back(p);
    pos = end + 2;
  }
  return out;
}

// SentencePiece's remove_extra_whitespaces normalisation (set in tok512.model, not in Llama-2's):
// ASCII spaces at the start and end are dropped and runs of them become one; other whitespace
// (tabs, newlines, U+00A0) is left alone. llama2.c's encoder has no normaliser, so tok512.bin
// matches tok512.model on normalise_spaces(text), not on text.
inline std::string normalise_spaces(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out.push_back(c);
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The "text" field of the first `limit` JSON lines of a file.
inline std::vector<std::string> read_jsonl_texts(const std::filesystem::path& path, std::size_t limit) {
  std::vector<std::string> texts;
  std::ifstream in(path);
  std::string line;
  while (texts.size() < limit && std::getline(in, line)) {
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  }
  return texts;
}

// tests/oracle/<name>, found from this header's own location in the source tree.
inline std::filesystem::path oracle_script(const std::string& name) {
  return test::repo_path("tests/oracle/" + name);
}

// Whether `python3 -c "import <module>"` works (python3 from PATH).
inline bool python_has(const std::string& module) {
  const std::string cmd = "python3 -c 'import " + module + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// One oracle answer: the text it encoded and the ids it produced.
struct OracleRecord {
  std::string text;
  std::vector<std::int32_t> ids;
};

inline std::vector<OracleRecord> read_oracle_output(const std::filesystem::path& path) {
  std::vector<OracleRecord> records;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    records.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<std::int32_t>>()});
  }
  return records;
}

}  // namespace qeval::test

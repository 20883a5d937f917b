// Per-token KL(full ‖ scheme) and Δp of one quantised scheme, kept on disk so that their
// percentiles (eval/percentiles.h) are exact at any run length with bounded memory.
//
// Layout of a values file, one block per window, appended in the order windows are scored:
//   int64 window index, int64 n (scored tokens), n × float64 KL, n × float64 Δp
// little-endian as the machine writes it, positions in order. float64, as qeval computes them
// (llama.cpp keeps float32). A window's block holds the values its row in the record sums
// (eval/token_scores.h: kl_sum, dp_sum) in the same order, so `check_values_against_rows` holds the
// file to the record to the bit.
//
// Where: a run writes scheme i's file as <folder>/scheme-<i>.values. A plain run's folder is a
// temporary one, removed after the record is written; a shard keeps it beside its record
// (<out>.tokens/) for `qeval merge`; a resumable run keeps it beside its state (<state>.tokens/)
// and drops the blocks of windows the state does not hold when it resumes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "eval/percentiles.h"
#include "eval/token_scores.h"

namespace qeval {

std::filesystem::path token_values_file(const std::filesystem::path& folder, std::size_t scheme);

// Appends blocks to a values file (created when absent); closes on destruction.
class TokenValuesWriter {
 public:
  explicit TokenValuesWriter(const std::filesystem::path& file);
  ~TokenValuesWriter();
  TokenValuesWriter(const TokenValuesWriter&) = delete;
  TokenValuesWriter& operator=(const TokenValuesWriter&) = delete;
  void append(std::int64_t window, const double* kl, const double* dp, std::int64_t n);
  void flush();

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

using TokenBlockVisitor = std::function<void(std::int64_t window, std::int64_t n, const double* kl, const double* dp)>;
// Every block of a file in order; refuses a truncated block or an impossible count, naming the file.
void visit_token_values(const std::filesystem::path& file, const TokenBlockVisitor& visit);

// Rewrites a file keeping only the blocks of `windows` (each once: a later repeat is dropped).
void retain_token_values(const std::filesystem::path& file, const std::set<std::int64_t>& windows);

// The files must hold exactly the rows' windows, once each, with the rows' token counts and
// bit-identical KL and Δp sums; throws naming the file and window otherwise.
void check_values_against_rows(const std::vector<std::filesystem::path>& files,
                               const std::map<std::int64_t, WindowScores>& rows, const std::string& scheme);

// KL and Δp distributions over every block of the files (sorting in memory up to
// `in_memory_limit` values, exact selection over the files beyond: the same numbers).
struct TokenDistributions {
  Distribution kl, dp;
};
TokenDistributions token_distributions(const std::vector<std::filesystem::path>& files,
                                       std::int64_t in_memory_limit = std::int64_t{1} << 22);

}  // namespace qeval

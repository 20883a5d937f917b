// A run's per-token values (eval/token_values_file.h): where they go, the hooks that write each
// quantised scheme's as its batches are scored, and the percentiles made from them at the end.
//
// The folder is kept when `keep` (a shard's <out>.tokens/ for merge, a resumable run's
// <state>.tokens/ until the run completes) and is a fresh temporary folder otherwise, removed with
// this object. `resumed` (a state's rows) keeps only the blocks of the windows it holds, dropping
// those an interrupted process scored after its last saved state.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "eval/evaluator.h"
#include "eval/token_values_file.h"

namespace qeval {

class TokenValuesRun {
 public:
  // `folder` empty: a temporary one. `resumed`: the state this run continues (empty: a fresh start,
  // which clears the folder).
  TokenValuesRun(const std::filesystem::path& folder, bool keep, std::vector<EvalScheme>& schemes, const EvalResult& resumed);
  ~TokenValuesRun();
  TokenValuesRun(const TokenValuesRun&) = delete;
  TokenValuesRun& operator=(const TokenValuesRun&) = delete;

  // After the evaluation: every quantised scheme's file is held to its rows (records/window_rows.h
  // sums, to the bit), then its KL and Δp percentiles go into the result.
  void finish(EvalResult& result);
  // Removes a kept folder (a resumable run that completed).
  void remove();
  const std::filesystem::path& folder() const { return folder_; }

 private:
  std::filesystem::path folder_;
  bool keep_;
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<TokenValuesWriter>> writers_;  // [0] unused: full precision has no values
};

}  // namespace qeval

#include "eval/token_values_run.h"

#include <fmt/format.h>

#include <random>
#include <set>

#include "common/error.h"
#include "common/phases.h"

namespace qeval {

namespace {
std::filesystem::path fresh_temporary_folder() {
  std::random_device random;
  const auto base = std::filesystem::temp_directory_path();
  for (int attempt = 0; attempt < 16; ++attempt) {
    const auto path = base / fmt::format("qeval-token-values-{:016x}", (std::uint64_t{random()} << 32) ^ random());
    if (std::filesystem::create_directory(path)) return path;
  }
  fail("per-token values: cannot make a temporary folder under {}", base.string());
}
}  // namespace

TokenValuesRun::TokenValuesRun(const std::filesystem::path& folder, bool keep, std::vector<EvalScheme>& schemes,
                               const EvalResult& resumed)
    : folder_(folder.empty() ? fresh_temporary_folder() : folder), keep_(keep && !folder.empty()) {
  std::filesystem::create_directories(folder_);
  for (std::size_t s = 0; s < schemes.size(); ++s) {
    names_.push_back(schemes[s].name);
    const auto file = token_values_file(folder_, s);
    if (s == 0) {
      writers_.emplace_back();
      continue;
    }
    if (resumed.schemes.size() == schemes.size()) {
      std::set<std::int64_t> windows;
      for (const auto& [index, row] : resumed.schemes[s].rows) windows.insert(index);
      retain_token_values(file, windows);
    } else {
      std::filesystem::remove(file);  // a fresh start: blocks of an earlier run are not this one's
    }
    auto writer = std::make_shared<TokenValuesWriter>(file);
    writers_.push_back(writer);
    auto previous = schemes[s].on_token_values;
    schemes[s].on_token_values = [writer, previous](const std::vector<std::int64_t>& windows,
                                                    const std::vector<std::int64_t>& first_scored,
                                                    const TokenValues& values, const TokenValues& full) {
      if (previous) previous(windows, first_scored, values, full);
      const std::int64_t P = values.kl.size(1);
      for (std::size_t b = 0; b < windows.size(); ++b) {
        const std::int64_t from = first_scored[b] - 1;  // as window_rows: the first scored prediction
        const auto offset = static_cast<std::int64_t>(b) * P + from;
        writer->append(windows[b], values.kl.data_ptr<double>() + offset, values.dp.data_ptr<double>() + offset, P - from);
      }
      writer->flush();  // before a state that counts these windows can be saved
    };
  }
}

TokenValuesRun::~TokenValuesRun() {
  writers_.clear();
  std::error_code ignored;
  if (!keep_) std::filesystem::remove_all(folder_, ignored);
}

void TokenValuesRun::finish(EvalResult& result) {
  for (std::size_t s = 1; s < writers_.size(); ++s) {
    PhaseScope scoring(Phase::head, static_cast<int>(s));
    writers_[s]->flush();
    const std::vector<std::filesystem::path> files = {token_values_file(folder_, s)};
    check_values_against_rows(files, result.schemes[s].rows, names_[s]);
    const TokenDistributions d = token_distributions(files);
    result.schemes[s].kl_values = d.kl;
    result.schemes[s].dp_values = d.dp;
  }
}

void TokenValuesRun::remove() {
  writers_.clear();
  std::filesystem::remove_all(folder_);
}

}  // namespace qeval

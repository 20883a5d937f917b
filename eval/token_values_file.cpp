#include "eval/token_values_file.h"

#include <fmt/format.h>

#include <cstring>

#include "common/error.h"

namespace qeval {

std::filesystem::path token_values_file(const std::filesystem::path& folder, std::size_t scheme) {
  return folder / fmt::format("scheme-{}.values", scheme);
}

TokenValuesWriter::TokenValuesWriter(const std::filesystem::path& file) : path_(file) {
  file_ = std::fopen(file.string().c_str(), "ab");
  QEVAL_CHECK(file_ != nullptr, "per-token values: cannot open {} for appending: {}", file.string(), std::strerror(errno));
}

TokenValuesWriter::~TokenValuesWriter() {
  if (file_) std::fclose(file_);
}

void TokenValuesWriter::append(std::int64_t window, const double* kl, const double* dp, std::int64_t n) {
  const std::int64_t head[2] = {window, n};
  const auto count = static_cast<std::size_t>(n);
  const bool ok = std::fwrite(head, sizeof head, 1, file_) == 1 && std::fwrite(kl, sizeof(double), count, file_) == count &&
                  std::fwrite(dp, sizeof(double), count, file_) == count;
  QEVAL_CHECK(ok, "per-token values: writing {} failed: {}", path_.string(), std::strerror(errno));
}

void TokenValuesWriter::flush() {
  QEVAL_CHECK(std::fflush(file_) == 0, "per-token values: writing {} failed: {}", path_.string(), std::strerror(errno));
}

void visit_token_values(const std::filesystem::path& file, const TokenBlockVisitor& visit) {
  std::FILE* f = std::fopen(file.string().c_str(), "rb");
  QEVAL_CHECK(f != nullptr, "per-token values: cannot read {}: {}", file.string(), std::strerror(errno));
  std::vector<double> values;
  try {
    std::int64_t head[2];
    while (std::fread(head, sizeof head, 1, f) == 1) {
      // A window scores fewer tokens than 2^31: anything larger is not a values file.
      QEVAL_CHECK(head[0] >= 0 && head[1] >= 0 && head[1] < (std::int64_t{1} << 31),
                  "per-token values: {}: a block says window {} with {} tokens: not a values file", file.string(), head[0],
                  head[1]);
      const auto n = static_cast<std::size_t>(head[1]);
      values.resize(2 * n);
      QEVAL_CHECK(std::fread(values.data(), sizeof(double), 2 * n, f) == 2 * n,
                  "per-token values: {}: window {}'s block is truncated", file.string(), head[0]);
      visit(head[0], head[1], values.data(), values.data() + n);
    }
    QEVAL_CHECK(std::feof(f), "per-token values: reading {} failed", file.string());
  } catch (...) {
    std::fclose(f);
    throw;
  }
  std::fclose(f);
}

void retain_token_values(const std::filesystem::path& file, const std::set<std::int64_t>& windows) {
  if (!std::filesystem::exists(file)) return;
  const std::filesystem::path kept = file.string() + ".kept";
  std::filesystem::remove(kept);
  {
    TokenValuesWriter out(kept);
    std::set<std::int64_t> written;
    visit_token_values(file, [&](std::int64_t w, std::int64_t n, const double* kl, const double* dp) {
      if (windows.count(w) && written.insert(w).second) out.append(w, kl, dp, n);
    });
    out.flush();
  }
  std::filesystem::rename(kept, file);
}

void check_values_against_rows(const std::vector<std::filesystem::path>& files,
                               const std::map<std::int64_t, WindowScores>& rows, const std::string& scheme) {
  std::set<std::int64_t> seen;
  for (const auto& file : files)
    visit_token_values(file, [&](std::int64_t w, std::int64_t n, const double* kl, const double* dp) {
      const auto row = rows.find(w);
      QEVAL_CHECK(row != rows.end(), "per-token values: {} holds window {}, which scheme {}'s rows do not", file.string(),
                  w, scheme);
      QEVAL_CHECK(seen.insert(w).second, "per-token values: {} holds window {} twice (scheme {})", file.string(), w,
                  scheme);
      double kl_sum = 0, dp_sum = 0;  // in position order, as the row's sums were made
      for (std::int64_t i = 0; i < n; ++i) {
        kl_sum += kl[i];
        dp_sum += dp[i];
      }
      QEVAL_CHECK(n == row->second.tokens && kl_sum == row->second.kl_sum && dp_sum == row->second.dp_sum,
                  "per-token values: {}: window {} of scheme {} has {} tokens, KL sum {}, Δp sum {}; its row says {}, {}, "
                  "{}: the values are not this record's",
                  file.string(), w, scheme, n, kl_sum, dp_sum, row->second.tokens, row->second.kl_sum, row->second.dp_sum);
    });
  QEVAL_CHECK(seen.size() == rows.size(), "per-token values of scheme {}: {} of its {} windows are missing from {}", scheme,
              rows.size() - seen.size(), rows.size(), files.empty() ? std::string("(no file)") : files.front().string());
}

TokenDistributions token_distributions(const std::vector<std::filesystem::path>& files, std::int64_t in_memory_limit) {
  std::int64_t count = 0;
  for (const auto& file : files)
    visit_token_values(file, [&](std::int64_t, std::int64_t n, const double*, const double*) { count += n; });
  TokenDistributions d;
  if (count <= in_memory_limit) {
    std::vector<double> kl, dp;
    kl.reserve(static_cast<std::size_t>(count));
    dp.reserve(static_cast<std::size_t>(count));
    for (const auto& file : files)
      visit_token_values(file, [&](std::int64_t, std::int64_t n, const double* k, const double* p) {
        kl.insert(kl.end(), k, k + n);
        dp.insert(dp.end(), p, p + n);
      });
    d.kl = distribution_of(std::move(kl));
    d.dp = distribution_of(std::move(dp));
    return d;
  }
  auto source = [&files](bool want_kl) -> ValueSource {
    return [&files, want_kl](const ValueChunk& visit) {
      for (const auto& file : files)
        visit_token_values(file, [&](std::int64_t, std::int64_t n, const double* k, const double* p) {
          visit(want_kl ? k : p, static_cast<std::size_t>(n));
        });
    };
  };
  d.kl = streamed_distribution(source(true));
  d.dp = streamed_distribution(source(false));
  return d;
}

}  // namespace qeval

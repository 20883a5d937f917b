#include "records/window_rows.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"

namespace qeval {

std::int64_t window_index_key(const std::string& key, const std::string& where) {
  std::int64_t index = -1;
  const char* end = key.data() + key.size();
  const auto [ptr, ec] = std::from_chars(key.data(), end, index);
  const bool digits_only = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
  QEVAL_CHECK(digits_only && ec == std::errc() && ptr == end && index >= 0 && (key == "0" || key[0] != '0'),
              "{}: window key {} is not a window index (a non-negative decimal integer)", where, in_quotes(key));
  return index;
}

WindowScores checked_window_scores(const nlohmann::json& row, std::int64_t max_tokens, bool full_precision,
                                   const std::string& where) {
  QEVAL_CHECK(row.is_object(), "{}: expected a row object, found {}", where, json_text(row));
  auto number = [&](const char* key) {
    QEVAL_CHECK(row.contains(key), "{}: the row has no \"{}\"", where, key);
    const nlohmann::json& v = row[key];
    QEVAL_CHECK(v.is_number() && std::isfinite(v.get<double>()), "{}: \"{}\" is {}: expected a finite number", where, key,
                json_text(v));
    return v.get<double>();
  };
  auto integer = [&](const char* key) {
    QEVAL_CHECK(row.contains(key), "{}: the row has no \"{}\"", where, key);
    return json_integer(row[key], fmt::format("{}: \"{}\"", where, key));
  };
  WindowScores s;
  s.tokens = integer("tokens");
  QEVAL_CHECK(s.tokens >= 1 && (max_tokens <= 0 || s.tokens <= max_tokens),
              "{}: \"tokens\" is {}: a window scores 1..{} tokens", where, s.tokens,
              max_tokens > 0 ? std::to_string(max_tokens) : std::string("n"));
  const double n = static_cast<double>(s.tokens);
  s.nll_sum = number("nll_sum");
  s.nll_sq_sum = number("nll_sq_sum");
  s.diff_sum = number("diff_sum");
  s.diff_sq_sum = number("diff_sq_sum");
  s.kl_sum = number("kl_sum");
  s.top1_agree = integer("top1_agree");
  s.dp_sum = number("dp_sum");
  auto squares_fit = [&](double sum, double sq) { return sq >= 0 && sq * n >= sum * sum * (1 - 1e-9) - 1e-12; };
  QEVAL_CHECK(s.nll_sum >= 0, "{}: \"nll_sum\" is {}: a negative log-likelihood sum is never negative", where, s.nll_sum);
  QEVAL_CHECK(squares_fit(s.nll_sum, s.nll_sq_sum),
              "{}: \"nll_sq_sum\" {} is below nll_sum² / tokens = {}: the sums do not belong together", where,
              s.nll_sq_sum, s.nll_sum * s.nll_sum / n);
  QEVAL_CHECK(squares_fit(s.diff_sum, s.diff_sq_sum),
              "{}: \"diff_sq_sum\" {} is below diff_sum² / tokens = {}: the sums do not belong together", where,
              s.diff_sq_sum, s.diff_sum * s.diff_sum / n);
  QEVAL_CHECK(s.kl_sum >= -1e-6 * n, "{}: \"kl_sum\" is {}: KL divergence is never negative", where, s.kl_sum);
  QEVAL_CHECK(s.top1_agree >= 0 && s.top1_agree <= s.tokens, "{}: \"top1_agree\" is {}: expected 0..{} (the tokens)",
              where, s.top1_agree, s.tokens);
  QEVAL_CHECK(std::fabs(s.dp_sum) <= n, "{}: \"dp_sum\" is {}: a sum of {} probability differences lies in [-{}, {}]",
              where, s.dp_sum, s.tokens, s.tokens, s.tokens);
  // Before the tails: a row of full precision that is not zero fails for that reason first, whatever
  // its tail sums say.
  if (full_precision)
    QEVAL_CHECK(s.diff_sum == 0 && s.diff_sq_sum == 0 && s.kl_sum == 0 && s.dp_sum == 0 && s.top1_agree == s.tokens,
                "{}: full precision compared with itself must have zero differences, zero KL and every top-1 equal "
                "(diff_sum {}, kl_sum {}, dp_sum {}, top1_agree {} of {})",
                where, s.diff_sum, s.kl_sum, s.dp_sum, s.top1_agree, s.tokens);
  s.tails = row.contains("kl_sq_sum");  // rows written before the tails have none of them
  if (s.tails) {
    s.kl_sq_sum = number("kl_sq_sum");
    s.rkl_sum = number("rkl_sum");
    s.rkl_sq_sum = number("rkl_sq_sum");
    s.dp_sq_sum = number("dp_sq_sum");
    s.dp_4_sum = number("dp_4_sum");
    s.top1_lost = integer("top1_lost");
    s.top1_gained = integer("top1_gained");
    QEVAL_CHECK(squares_fit(s.kl_sum, s.kl_sq_sum) && squares_fit(s.rkl_sum, s.rkl_sq_sum),
                "{}: \"kl_sq_sum\" {} or \"rkl_sq_sum\" {} is below its sum² / tokens: the sums do not belong together",
                where, s.kl_sq_sum, s.rkl_sq_sum);
    QEVAL_CHECK(s.rkl_sum >= -1e-6 * n, "{}: \"rkl_sum\" is {}: KL divergence is never negative", where, s.rkl_sum);
    QEVAL_CHECK(squares_fit(s.dp_sum, s.dp_sq_sum) && s.dp_sq_sum <= n * (1 + 1e-9) && s.dp_4_sum >= 0 &&
                    s.dp_4_sum <= s.dp_sq_sum * (1 + 1e-9) + 1e-12,
                "{}: \"dp_sq_sum\" {} and \"dp_4_sum\" {} do not fit {} probability differences summing to {}", where,
                s.dp_sq_sum, s.dp_4_sum, s.tokens, s.dp_sum);
    QEVAL_CHECK(s.top1_lost >= 0 && s.top1_gained >= 0 && s.top1_lost + s.top1_gained <= s.tokens,
                "{}: top-1 flips lost {} and gained {}: expected counts adding up to at most {} (the tokens)", where,
                s.top1_lost, s.top1_gained, s.tokens);
    QEVAL_CHECK(row.contains("buckets") && row["buckets"].is_array(), "{}: the row has no \"buckets\" list", where);
    std::int64_t bucket_tokens = 0;
    for (const auto& b : row["buckets"]) {
      QEVAL_CHECK(b.is_array() && b.size() == 4 && b[0].is_number_integer() && b[1].is_number() && b[2].is_number() &&
                      b[3].is_number(),
                  "{}: a bucket should be [tokens, diff_sum, diff_sq_sum, kl_sum], found {}", where, json_text(b));
      BucketScores x{json_integer(b[0], where + ": bucket tokens"), b[1].get<double>(), b[2].get<double>(), b[3].get<double>()};
      QEVAL_CHECK(x.tokens >= 0 && std::isfinite(x.diff_sum) && std::isfinite(x.diff_sq_sum) && std::isfinite(x.kl_sum) &&
                      x.diff_sq_sum * static_cast<double>(x.tokens) >= x.diff_sum * x.diff_sum * (1 - 1e-9) - 1e-12 &&
                      x.kl_sum >= -1e-6 * static_cast<double>(x.tokens) && (x.tokens > 0 || x == BucketScores{}),
                  "{}: bucket {} is not in its domain (tokens >= 0, finite sums, squares at least sum² / tokens, KL >= 0)",
                  where, json_text(b));
      bucket_tokens += x.tokens;
      s.buckets.push_back(x);
    }
    QEVAL_CHECK(full_precision ? s.buckets.empty() : bucket_tokens == s.tokens,
                "{}: the position buckets hold {} tokens, the row {}{}", where, bucket_tokens, s.tokens,
                full_precision ? " (full precision compared with itself has no buckets)" : "");
  }
  if (full_precision)
    QEVAL_CHECK(s.kl_sq_sum == 0 && s.rkl_sum == 0 && s.dp_sq_sum == 0 && s.top1_lost == 0 && s.top1_gained == 0,
                "{}: full precision compared with itself must have zero KL, Δp and flips", where);
  return s;
}

std::map<std::int64_t, WindowScores> checked_window_rows(const nlohmann::json& rows, std::int64_t max_tokens,
                                                         bool full_precision, const std::string& where) {
  QEVAL_CHECK(rows.is_object(), "{}: rows should be an object of window rows (keyed by window index), found {}", where,
              json_text(rows));
  std::map<std::int64_t, WindowScores> out;
  for (const auto& [key, row] : rows.items()) {
    const std::int64_t index = window_index_key(key, where);
    out[index] = checked_window_scores(row, max_tokens, full_precision, fmt::format("{}, window {}", where, index));
  }
  return out;
}

std::uint64_t hash_from_hex(const nlohmann::json& value, const std::string& where) {
  QEVAL_CHECK(value.is_string(), "{}: expected a hash of 16 hex digits, found {}", where, json_text(value));
  const std::string& hex = value.get_ref<const std::string&>();
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
  QEVAL_CHECK(hex.size() == 16 && ec == std::errc() && ptr == hex.data() + hex.size(),
              "{}: expected a hash of 16 hex digits, found {}", where, in_quotes(hex));
  return v;
}

std::map<std::int64_t, std::uint64_t> checked_window_hashes(const nlohmann::json& hashes, const std::string& where) {
  QEVAL_CHECK(hashes.is_object(), "{} should be an object of window hashes (keyed by window index), found {}", where,
              json_text(hashes));
  std::map<std::int64_t, std::uint64_t> out;
  for (const auto& [key, hex] : hashes.items()) {
    const std::int64_t index = window_index_key(key, where);
    out[index] = hash_from_hex(hex, fmt::format("{}[{}]", where, index));
  }
  return out;
}

}  // namespace qeval

#include "train/kept_checkpoints.h"

#include <unistd.h>

#include <algorithm>
#include <regex>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/qeval_checkpoint.h"

namespace qeval::train {
namespace fs = std::filesystem;

KeepSchedule KeepSchedule::parse(const std::string& spec) {
  KeepSchedule s;
  if (spec.empty()) return s;
  static const std::regex form(R"((log:)?([1-9][0-9]{0,17}))");
  std::smatch m;
  QEVAL_CHECK(std::regex_match(spec, m, form),
              "--keep-checkpoints '{}': expected N (every N steps) or log:N (1, 2, 4, ... below N, then every N), "
              "N a positive integer", spec);
  s.log_spaced = m[1].matched;
  s.every = std::stoll(m[2].str());
  return s;
}

bool KeepSchedule::keeps(std::int64_t step) const {
  if (every <= 0 || step < 1) return false;
  if (step % every == 0) return true;
  return log_spaced && step < every && (step & (step - 1)) == 0;  // a power of two below N
}

std::string KeepSchedule::to_string() const {
  if (every <= 0) return "";
  return (log_spaced ? "log:" : "") + std::to_string(every);
}

std::string kept_folder_name(std::int64_t step) { return "step-" + std::to_string(step); }

void copy_tokenizer_files(const fs::path& tokenizer, const fs::path& dir) {
  auto copy = [&](const fs::path& f) {
    QEVAL_CHECK(fs::file_size(f) <= (std::uintmax_t{64} << 20), "checkpoint: tokenizer file {} is over 64 MiB",
                f.string());
    fs::copy_file(f, dir / f.filename(), fs::copy_options::overwrite_existing);
  };
  if (fs::is_directory(tokenizer)) {
    for (const auto& e : fs::directory_iterator(tokenizer))
      if (e.is_regular_file()) copy(e.path());
  } else {
    copy(tokenizer);
  }
}

namespace {

std::vector<std::int64_t> kept_steps_present(const fs::path& out) {
  static const std::regex name(R"(step-([0-9]{1,18}))");
  std::vector<std::int64_t> steps;
  for (const auto& e : fs::directory_iterator(out)) {
    std::smatch m;
    const std::string file = e.path().filename().string();
    if (e.is_directory() && std::regex_match(file, m, name)) steps.push_back(std::stoll(m[1].str()));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

void save_kept_checkpoint(const fs::path& out, const KeepSchedule& schedule, std::int64_t step,
                          std::int64_t total_steps, const ModelConfig& config, const ModelWeights& weights,
                          const nlohmann::json& metadata, const fs::path& tokenizer) {
  fs::create_directories(out);
  const fs::path final_dir = out / kept_folder_name(step);
  // Hidden while partial: a watcher lists `step-N` folders only, and sees this one once renamed.
  const fs::path partial = out / fmt::format(".{}.partial-{}", kept_folder_name(step), ::getpid());
  fs::remove_all(partial);
  fs::create_directories(partial);
  try {
    save_qeval_checkpoint(partial, config, weights, metadata);
    copy_tokenizer_files(tokenizer, partial);
    // A resumed run redoes the steps after its checkpoint bit-identically: the old copy can go.
    fs::remove_all(final_dir);
    fs::rename(partial, final_dir);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    throw;
  }
  const nlohmann::json manifest = {{"format", "qeval kept checkpoints"},
                                   {"schedule", schedule.to_string()},
                                   {"total_steps", total_steps},
                                   {"last_step", step},
                                   {"finished", step >= total_steps},
                                   {"steps", kept_steps_present(out)}};
  write_file_atomic(out / "checkpoints.json", manifest.dump(1) + "\n");
}

}  // namespace qeval::train

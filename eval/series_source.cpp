#include "eval/series_source.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <regex>
#include <sstream>

#include "common/error.h"
#include "common/files.h"
#include "common/json_integer.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

const std::regex kStepFolder(R"(step-([0-9]{1,18}))");
const std::regex kHfFolder(R"(checkpoint-([0-9]{1,18}))");

bool is_list_file(const fs::path& path) {
  const std::string ext = path.extension().string();
  return fs::is_regular_file(path) && (ext == ".txt" || ext == ".list");
}

// Subfolders of `dir` whose names match `form`, by the number in the name.
std::map<std::int64_t, fs::path> numbered_folders(const fs::path& dir, const std::regex& form) {
  std::map<std::int64_t, fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !std::regex_match(name, m, form)) continue;
    const std::int64_t step = std::stoll(m[1].str());
    // step-2/ and step-002/ name one step twice: which one is it? (one was dropped silently; issue 51)
    const auto [it, inserted] = out.emplace(step, e.path());
    QEVAL_CHECK(inserted, "{}: folders {} and {} both name step {}; keep one of them", dir.string(),
                it->second.filename().string(), name, step);
  }
  return out;
}

std::optional<nlohmann::json> read_json(const fs::path& path) {
  if (!fs::is_regular_file(path)) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// A step or token count from a checkpoint's metadata: an integer >= 0 (a negative step would
// become a trajectory row before every real one).
std::int64_t count_at(const nlohmann::json& j, const std::string& where) {
  const std::int64_t n = json_integer(j, where);
  QEVAL_CHECK(n >= 0, "{}: should be a count >= 0, found {}", where, n);
  return n;
}

nlohmann::json number_or_null(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key] : nlohmann::json(nullptr);
}

// What a qeval checkpoint's config.json metadata says (kept checkpoints, or any qeval train folder).
void read_qeval_metadata(const fs::path& dir, SeriesCheckpoint& c, bool step_known) {
  const auto config = read_json(dir / "config.json");
  if (!config) return;
  const nlohmann::json meta = config->value("metadata", nlohmann::json::object());
  if (!meta.is_object()) return;
  if (meta.contains("step")) {
    const std::int64_t step = count_at(meta["step"], (dir / "config.json").string() + ": metadata.step");
    QEVAL_CHECK(!step_known || step == c.step, "{}: its metadata says step {}, its name or list line says {}",
                (dir / "config.json").string(), step, c.step);
    c.step = step;
  }
  if (meta.contains("tokens_seen"))
    c.tokens = count_at(meta["tokens_seen"], (dir / "config.json").string() + ": metadata.tokens_seen");
  const nlohmann::json recipe = meta.value("training", nlohmann::json::object());
  c.training = {{"lr", number_or_null(meta, "lr")},
                {"val_loss", number_or_null(meta, "val_loss")},
                {"train_loss", number_or_null(meta, "train_loss")},
                {"warmup", number_or_null(recipe, "warmup")},
                {"total_steps", number_or_null(recipe, "steps")}};
}

// What an HF checkpoint's trainer_state.json says; false when it is absent or not JSON yet.
bool read_trainer_state(const fs::path& dir, SeriesCheckpoint& c, bool step_known, std::int64_t* max_steps) {
  const auto state = read_json(dir / "trainer_state.json");
  if (!state || !state->is_object()) return false;
  const std::string where = (dir / "trainer_state.json").string();
  if (state->contains("global_step")) {
    const std::int64_t step = count_at((*state)["global_step"], where + ": global_step");
    QEVAL_CHECK(!step_known || step == c.step, "{}: global_step is {}, the folder's name or list line says {}", where,
                step, c.step);
    c.step = step;
  }
  if (max_steps && state->contains("max_steps")) *max_steps = count_at((*state)["max_steps"], where + ": max_steps");
  // num_input_tokens_seen is 0 unless the run counted tokens (include_num_input_tokens_seen).
  if (auto t = json_int64(state->value("num_input_tokens_seen", nlohmann::json(nullptr))); t && *t > 0) c.tokens = t;
  nlohmann::json lr = nullptr, loss = nullptr, eval_loss = nullptr;
  for (const auto& entry : state->value("log_history", nlohmann::json::array())) {
    if (!entry.is_object() || json_int64(entry.value("step", nlohmann::json(nullptr))) != c.step) continue;
    if (entry.contains("learning_rate")) lr = number_or_null(entry, "learning_rate");
    if (entry.contains("loss")) loss = number_or_null(entry, "loss");
    if (entry.contains("eval_loss")) eval_loss = number_or_null(entry, "eval_loss");
    if (!c.tokens)
      if (auto t = json_int64(entry.value("num_input_tokens_seen", nlohmann::json(nullptr))); t && *t > 0) c.tokens = t;
  }
  c.training = {{"lr", lr}, {"val_loss", eval_loss}, {"train_loss", loss}, {"warmup", nullptr},
                {"total_steps", number_or_null(*state, "max_steps")}};
  return true;
}

double seconds_since_last_change(const fs::path& dir) {
  auto newest = fs::file_time_type::min();
  for (const auto& e : fs::recursive_directory_iterator(dir)) newest = std::max(newest, e.last_write_time());
  return std::chrono::duration<double>(fs::file_time_type::clock::now() - newest).count();
}

void list_qeval_steps(const fs::path& dir, SeriesListing& out) {
  for (const auto& [step, path] : numbered_folders(dir, kStepFolder)) {
    SeriesCheckpoint c;
    c.name = path.filename().string();
    c.path = path;
    c.step = step;
    read_qeval_metadata(path, c, /*step_known=*/true);
    out.checkpoints.push_back(std::move(c));
  }
  // Finished only when every step the manifest names is among the folders listed above, not merely
  // on disk by now: the trainer may write its last step and the finished manifest between the
  // listing and this read, and a watcher that believed the manifest then stopped one step short.
  if (const auto manifest = read_json(dir / "checkpoints.json"); manifest && manifest->value("finished", false)) {
    out.finished = true;
    for (const auto& step : manifest->value("steps", nlohmann::json::array())) {
      const bool listed = std::any_of(out.checkpoints.begin(), out.checkpoints.end(), [&](const SeriesCheckpoint& c) {
        return step.is_number_integer() && c.step == step.get<std::int64_t>();
      });
      if (!listed) out.finished = false;
    }
  }
}

void list_hf_checkpoints(const fs::path& dir, double settle_seconds, SeriesListing& out) {
  for (const auto& [step, path] : numbered_folders(dir, kHfFolder)) {
    SeriesCheckpoint c;
    c.name = path.filename().string();
    c.path = path;
    c.step = step;
    std::int64_t max_steps = 0;
    const bool has_state = read_trainer_state(path, c, /*step_known=*/true, &max_steps);
    if (settle_seconds > 0 && (!has_state || seconds_since_last_change(path) < settle_seconds)) {
      out.pending.push_back(c.name);
      continue;
    }
    QEVAL_CHECK(has_state, "{}: no readable trainer_state.json (an HF Trainer checkpoint has one; is it still being "
                "written? --watch waits for it)", path.string());
    if (max_steps > 0 && c.step >= max_steps) out.finished = true;
    out.checkpoints.push_back(std::move(c));
  }
}

void list_file_lines(const fs::path& list, double settle_seconds, SeriesListing& out) {
  const std::string text = read_file(list);
  std::istringstream in(text);
  std::size_t line_no = 0, consumed = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    consumed += line.size() + 1;
    // A last line without its newline may be half-written by the producer: left for the next look.
    if (consumed > text.size() && settle_seconds > 0) {
      out.pending.push_back(fmt::format("{} line {}", list.string(), line_no));
      break;
    }
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string path_word, step_word, tokens_word, extra;
    if (!(words >> path_word)) continue;
    words >> step_word >> tokens_word;
    const std::string where = fmt::format("{} line {}", list.string(), line_no);
    QEVAL_CHECK(!(words >> extra), "{}: expected PATH [STEP [TOKENS]], found more words ('{}')", where, extra);
    const fs::path path = fs::path(path_word).is_absolute() ? fs::path(path_word) : list.parent_path() / path_word;
    QEVAL_CHECK(fs::exists(path), "{}: checkpoint {} does not exist", where, path.string());
    SeriesCheckpoint c;
    c.name = path_word;
    c.path = path;
    auto integer = [&](const std::string& word, const char* what) {
      static const std::regex digits("[0-9]{1,18}");
      QEVAL_CHECK(std::regex_match(word, digits), "{}: {} should be a non-negative integer, found '{}'", where, what, word);
      return std::stoll(word);
    };
    const bool step_given = !step_word.empty();
    if (step_given) c.step = integer(step_word, "STEP");
    if (!tokens_word.empty()) c.tokens = integer(tokens_word, "TOKENS");
    const std::optional<std::int64_t> tokens_given = c.tokens;
    bool found = false;
    if (fs::is_directory(path)) {
      if (fs::exists(path / "trainer_state.json")) {
        found = read_trainer_state(path, c, step_given, nullptr);
      } else if (fs::exists(path / "config.json")) {
        read_qeval_metadata(path, c, step_given);
        found = read_json(path / "config.json").value_or(nlohmann::json()).value("metadata", nlohmann::json()).contains("step");
      }
    }
    if (tokens_given) c.tokens = tokens_given;  // the list's word wins over what the checkpoint says
    if (!step_given && !found) {
      static const std::regex last_number(R"(.*?([0-9]{1,18})[^0-9]*$)");
      std::smatch m;
      const std::string name = path.filename().empty() ? path.parent_path().filename().string() : path.filename().string();
      QEVAL_CHECK(std::regex_match(name, m, last_number),
                  "{}: no STEP given and none found in {} (no qeval metadata, trainer_state.json or number in its name)",
                  where, path.string());
      c.step = std::stoll(m[1].str());
    }
    out.checkpoints.push_back(std::move(c));
  }
}

}  // namespace

std::string to_string(SeriesFormat format) {
  switch (format) {
    case SeriesFormat::qeval_steps: return "qeval step-N";
    case SeriesFormat::hf_trainer: return "hf-trainer checkpoint-N";
    case SeriesFormat::list_file: return "list";
  }
  return "?";
}

bool is_series_path(const fs::path& path) {
  std::error_code ec;
  if (is_list_file(path)) return true;
  if (!fs::is_directory(path, ec)) return false;
  return !numbered_folders(path, kStepFolder).empty() || !numbered_folders(path, kHfFolder).empty();
}

SeriesListing list_series(const fs::path& path, double settle_seconds) {
  SeriesListing out;
  out.source = path;
  if (is_list_file(path)) {
    out.format = SeriesFormat::list_file;
    list_file_lines(path, settle_seconds, out);
  } else {
    QEVAL_CHECK(fs::is_directory(path), "{}: not a folder of checkpoints or a list file (.txt, .list)", path.string());
    const bool steps = !numbered_folders(path, kStepFolder).empty();
    const bool hf = !numbered_folders(path, kHfFolder).empty();
    QEVAL_CHECK(!(steps && hf), "{}: holds both step-N/ (qeval train) and checkpoint-N/ (HF Trainer) folders; list the "
                "ones to evaluate in a list file", path.string());
    QEVAL_CHECK(steps || hf, "{}: no step-N/ or checkpoint-N/ folders in it", path.string());
    out.format = steps ? SeriesFormat::qeval_steps : SeriesFormat::hf_trainer;
    if (steps) list_qeval_steps(path, out);
    else list_hf_checkpoints(path, settle_seconds, out);
  }
  std::stable_sort(out.checkpoints.begin(), out.checkpoints.end(),
                   [](const auto& a, const auto& b) { return a.step < b.step; });
  for (std::size_t i = 1; i < out.checkpoints.size(); ++i) {
    const SeriesCheckpoint &before = out.checkpoints[i - 1], &c = out.checkpoints[i];
    QEVAL_CHECK(c.step != before.step, "{}: {} and {} are both step {}", path.string(), before.name, c.name, c.step);
    // Tokens seen grow with the steps of one run: a later step that has seen fewer is a typo or two runs mixed.
    QEVAL_CHECK(!c.tokens || !before.tokens || *c.tokens >= *before.tokens,
                "{}: step {} ({}) has seen {} tokens, fewer than step {} ({}) with {}", path.string(), c.step, c.name,
                *c.tokens, before.step, before.name, *before.tokens);
  }
  return out;
}

}  // namespace qeval

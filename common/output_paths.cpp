#include "common/output_paths.h"

#include <algorithm>
#include <system_error>

#include "common/error.h"
#include "common/printable.h"

namespace fs = std::filesystem;

namespace qeval {
namespace {

std::vector<RolePath>& command_inputs() {
  static std::vector<RolePath> inputs;
  return inputs;
}

// Links resolved as far as the path exists; the rest (an output not written yet) as given.
fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(p, ec);
  return ec ? fs::absolute(p, ec).lexically_normal() : r;
}

// Whether `path` lies inside the folder `folder` (both resolved).
bool inside(const fs::path& path, const fs::path& folder) {
  const fs::path p = resolved(path), f = resolved(folder);
  const auto [f_end, p_at] = std::mismatch(f.begin(), f.end(), p.begin(), p.end());
  return f_end == f.end() && p_at != p.end();
}

bool is_folder(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::vector<RolePath> with_noted(const std::vector<RolePath>& inputs) {
  std::vector<RolePath> all = inputs;
  all.insert(all.end(), command_inputs().begin(), command_inputs().end());
  return all;
}

}  // namespace

void note_command_input(const std::string& role, const fs::path& path) { command_inputs().push_back({role, path}); }

const std::vector<RolePath>& noted_command_inputs() { return command_inputs(); }

bool same_path(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return resolved(a) == resolved(b);
}

void check_outputs_apart(const std::vector<RolePath>& outputs, const std::vector<RolePath>& inputs) {
  const std::vector<RolePath> all = with_noted(inputs);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const RolePath& out = outputs[i];
    if (out.path.empty()) continue;
    for (const RolePath& in : all) {
      if (in.path.empty()) continue;
      QEVAL_CHECK(!same_path(out.path, in.path),
                  "{} {}: is the {} ({}); writing it would overwrite an input; choose another path", out.role,
                  printable(out.path.string()), in.role, printable(in.path.string()));
      // A folder input (an HF checkpoint, a series of checkpoints): nothing is written inside it.
      QEVAL_CHECK(!is_folder(in.path) || !inside(out.path, in.path),
                  "{} {}: is inside the {} folder {}; writing there could overwrite or add to an input; choose a path "
                  "outside it",
                  out.role, printable(out.path.string()), in.role, printable(in.path.string()));
    }
    for (std::size_t j = 0; j < i; ++j)
      QEVAL_CHECK(outputs[j].path.empty() || !same_path(out.path, outputs[j].path),
                  "{} {}: is also written as {} ({}); one would replace the other; choose another path", out.role,
                  printable(out.path.string()), outputs[j].role, printable(outputs[j].path.string()));
  }
}

void check_output_is_not_an_input(const std::string& output, const std::string& option,
                                  const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (output.empty()) return;
  std::vector<RolePath> in;
  for (const auto& [what, path] : inputs) in.push_back({what, path});
  check_outputs_apart({{option, output}}, in);
}

void check_output_folder_apart(const fs::path& dir, const std::string& option, const std::vector<RolePath>& inputs) {
  if (dir.empty()) return;
  check_outputs_apart({{option, dir}}, inputs);
  for (const RolePath& in : with_noted(inputs))
    QEVAL_CHECK(in.path.empty() || !inside(in.path, dir),
                "{} {}: holds the {} ({}); the files written there could replace it; choose a folder that holds no "
                "input",
                option, printable(dir.string()), in.role, printable(in.path.string()));
}

std::vector<RolePath> figure_files(const fs::path& dir, const std::vector<std::string>& stems, const std::string& option) {
  std::vector<RolePath> files;
  for (const std::string& stem : stems)
    for (const char* ext : {".dat", ".gp", ".png", ".log"}) files.push_back({option, dir / (stem + ext)});
  return files;
}

void check_not_in_checkpoint(const fs::path& dir, const std::string& option, const fs::path& model) {
  if (dir.empty() || model.empty()) return;
  std::error_code ec;
  const fs::path checkpoint = is_folder(model) ? model : (fs::exists(model, ec) ? resolved(model).parent_path() : fs::path());
  if (checkpoint.empty()) return;
  QEVAL_CHECK(!same_path(dir, checkpoint) && !inside(dir, checkpoint),
              "{} {}: is the checkpoint folder {} of the model {} (or inside it); pictures are never written into a "
              "checkpoint; choose another folder",
              option, printable(dir.string()), printable(checkpoint.string()), printable(model.string()));
}

}  // namespace qeval

// No output replaces an input (issue 63): every file a command writes — its record, report, state
// file, pictures and their data — is compared, links resolved, with every file and folder the
// command reads (config, scheme files, protocol, rules, data, model, tokenizer, records), and
// with the command's other outputs, before any work is done. One place for every subcommand.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace qeval {

// A path a command reads or writes, with what it is: ("--out", "r.json"), ("data file", "x.txt").
struct RolePath {
  std::string role;
  std::filesystem::path path;
};

// Inputs of this process that no subcommand sees as an option (the --config files, expanded before
// parsing): cli/json_config notes them here, and every check below includes them.
void note_command_input(const std::string& role, const std::filesystem::path& path);
const std::vector<RolePath>& noted_command_inputs();

// Refuses (qeval::Error naming the output's option, both paths and what the input is) when an
// output is an input file or folder (the same file through links too), lies inside an input folder
// (an HF checkpoint, a series), or is the same file as another output. Empty paths are skipped.
void check_outputs_apart(const std::vector<RolePath>& outputs, const std::vector<RolePath>& inputs);

// One output against (what, path) inputs; the noted command inputs are included.
void check_output_is_not_an_input(const std::string& output, const std::string& option,
                                  const std::vector<std::pair<std::string, std::string>>& inputs);

// An output folder a command fills with files of its own (train's checkpoint): as above, and
// besides no input may lie inside it.
void check_output_folder_apart(const std::filesystem::path& dir, const std::string& option,
                               const std::vector<RolePath>& inputs);

// The files a picture folder receives for each stem: STEM.dat, STEM.gp, STEM.png and gnuplot's
// STEM.log, each with `option` as its role.
std::vector<RolePath> figure_files(const std::filesystem::path& dir, const std::vector<std::string>& stems,
                                   const std::string& option);

// Pictures never go into a checkpoint: refuses when `dir` is the checkpoint folder of `model` (the
// model folder itself, or the folder holding a model file such as a .gguf or llama2.c .bin) or lies
// inside it.
void check_not_in_checkpoint(const std::filesystem::path& dir, const std::string& option, const std::filesystem::path& model);

// Whether two paths name the same file once links are resolved (the paths need not exist).
bool same_path(const std::filesystem::path& a, const std::filesystem::path& b);

}  // namespace qeval

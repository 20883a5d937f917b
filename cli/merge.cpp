// `qeval merge SHARD.json ... --out MERGED.json`: shard records into the one-run record.
#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "common/error.h"
#include "common/files.h"
#include "records/merge.h"
#include "records/record.h"
#include "reports/table.h"

namespace qeval::cli {

void add_merge_command(CLI::App& app) {
  auto paths = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto allow_partial = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("merge", "combine shard records (eval --shard i/n) into the record one run gives");
  cmd->add_option("shards", *paths, "shard records, one per shard, any order")->required();
  cmd->add_option("--out,-o", *out, "write the merged record here, atomically")->required()->check(output_path());
  cmd->add_flag("--allow-partial", *allow_partial,
                "write a record even when shards or windows are missing (marked \"partial\"; check refuses it unless "
                "told --allow-partial too)");
  cmd->callback([paths, out, allow_partial] {
    check_output_file(*out, "--out");
    for (const auto& p : *paths) check_output_is_not_an_input(*out, "--out", {{"shard record", p}});
    std::vector<nlohmann::json> shards;
    for (const auto& p : *paths) shards.push_back(read_record(p));
    nlohmann::json merged = merge_shard_records(shards, *paths, *allow_partial);
    write_record(*out, merged);
    if (merged.contains("per_token_values_missing"))
      fmt::print(stderr, "no KL or Δp percentiles in the merged record: per-token values missing beside the shards ({})\n",
                 merged["per_token_values_missing"].dump());
    fmt::print("{}", scheme_table_markdown(merged));
    fmt::print(stderr, "merged {} shards into {}\n", shards.size(), *out);
  });
}

}  // namespace qeval::cli

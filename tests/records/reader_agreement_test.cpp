// One verifier for every reader (issue 63): records qeval wrote — stories260K with int8-coarse and
// int8-moderate and two rounding variants each, and the tiny Jamba fixture (Mamba layers 0 and 2,
// attention layers 1 and 3), each as one record and as two shards — are edited one way per class
// of forgery, and every reader refuses the edit with the message verify_record gives, naming the
// file and the key: `compare`, `check` (the edited record as the baseline), `plot`, `merge` (the
// same edit on a shard) and the series reader (`compare` of a series record that points at the
// edited record). Before issue 63 each of these edits passed at least one reader.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "records/record_verify.h"
#include "records/rounding_band.h"
#include "records/series_record.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const fs::path& path) { return json::parse(read_file(path)); }

// The records every case edits, evaluated once for the suite.
struct Originals {
  test::TempDir dir;
  json stories, stories_shard0, jamba, jamba_shard0;
  fs::path stories_path, stories_shard1, jamba_path, jamba_shard1;
};
Originals* originals = nullptr;

class ReaderAgreement : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    originals = new Originals;
    Originals& o = *originals;
    const std::string stories = " --data-dir " + test::data_dir().string() +
                                " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt "
                                "--seq-len 64 --max-windows 4 --schemes full,int8-coarse,int8-moderate --rounding-band 2";
    // Jamba's fixture has no tokenizer: a uint16 token file of ids below its vocabulary of 80.
    std::string tokens;
    for (std::uint16_t i = 0; i < 256; ++i) {
      const std::uint16_t id = static_cast<std::uint16_t>((i * 37 + 11) % 80);
      tokens.append(reinterpret_cast<const char*>(&id), sizeof id);
    }
    test::write_bytes(o.dir / "val.bin", tokens);
    const std::string jamba = " -q --model " + test::repo_path("tests/model/fixtures/tiny-jamba-hf").string() + " --data " +
                              (o.dir / "val.bin").string() +
                              " --token-dtype uint16 --seq-len 16 --max-windows 4 --schemes full,int8-coarse";
    struct Run {
      std::string args;
      const char* name;
    };
    for (const Run& run : {Run{test::kEval + stories, "stories.json"}, Run{test::kEval + stories + " --shard 0/2", "stories-0.json"},
                           Run{test::kEval + stories + " --shard 1/2", "stories-1.json"}, Run{"eval" + jamba, "jamba.json"},
                           Run{"eval" + jamba + " --shard 0/2", "jamba-0.json"},
                           Run{"eval" + jamba + " --shard 1/2", "jamba-1.json"}}) {
      const test::CommandResult r = test::run_qeval(run.args + " --out " + (o.dir / run.name).string());
      ASSERT_EQ(r.status, 0) << run.args << "\n" << r.output;
    }
    o.stories_path = o.dir / "stories.json";
    o.stories = read_json(o.stories_path);
    o.stories_shard0 = read_json(o.dir / "stories-0.json");
    o.stories_shard1 = o.dir / "stories-1.json";
    o.jamba_path = o.dir / "jamba.json";
    o.jamba = read_json(o.jamba_path);
    o.jamba_shard0 = read_json(o.dir / "jamba-0.json");
    o.jamba_shard1 = o.dir / "jamba-1.json";
    test::write_bytes(o.dir / "tolerances.json",
                      R"({"schemes": {"*": {"dppl_abs": 100}, "int8-coarse": {"dppl_abs": 100, "band": 3}}})");
    test::write_bytes(o.dir / "tolerances-jamba.json", R"({"schemes": {"*": {"dppl_abs": 100}}})");
  }
  static void TearDownTestSuite() {
    delete originals;
    originals = nullptr;
  }
  void SetUp() override {
    if (!originals || originals->stories.is_null() || originals->jamba.is_null()) GTEST_FAIL() << "the records were not made";
  }
};

// The message verify_record gives for `record` read from `path`; fails the test when it verifies.
std::string verifier_message(const json& record, const fs::path& path) {
  try {
    verify_record(record, path.string());
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << path << " verifies";
  return "(verified)";
}

enum class Model { stories, jamba };

// Applies `edit` to the record and to shard 0, and runs every reader on the results: each must
// exit 2 with verify_record's message, which names the file and contains `key`.
void expect_every_reader_refuses(const std::string& name, Model model, const std::function<void(json&)>& edit,
                                 const std::string& key) {
  SCOPED_TRACE(name);
  const Originals& o = *originals;
  const bool stories = model == Model::stories;
  const fs::path dir = o.dir / name;
  fs::create_directories(dir);

  json record = stories ? o.stories : o.jamba;
  edit(record);
  const fs::path path = dir / "record.json";
  test::write_bytes(path, record.dump(1));
  const std::string message = verifier_message(record, path);
  EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u) << message;
  EXPECT_TRUE(test::contains(message, key)) << message;

  json shard = stories ? o.stories_shard0 : o.jamba_shard0;
  edit(shard);
  const fs::path shard_path = dir / "shard-0.json";
  test::write_bytes(shard_path, shard.dump(1));
  const std::string shard_message = verifier_message(shard, shard_path);
  EXPECT_TRUE(test::contains(shard_message, key)) << shard_message;

  // A series of one checkpoint whose record is the edited one.
  SeriesCheckpoint checkpoint;
  checkpoint.name = "step-1";
  checkpoint.path = record.at("model").value("path", "");
  checkpoint.step = 1;
  SeriesListing listing;
  const json series = build_series_record(listing, "run", json::object(), {series_evaluation_identity(record)},
                                          {series_entry(checkpoint, record, path.string())});
  const fs::path series_path = dir / "series.json";
  test::write_bytes(series_path, series.dump(1));

  const fs::path tolerances = o.dir / (stories ? "tolerances.json" : "tolerances-jamba.json");
  const fs::path original = stories ? o.stories_path : o.jamba_path;
  struct Reader {
    const char* name;
    std::string args;
    const std::string& expected;
  };
  for (const Reader& reader :
       {Reader{"compare", "compare " + path.string(), message},
        Reader{"check", "check --baseline " + path.string() + " " + original.string() + " -t " + tolerances.string(), message},
        Reader{"plot", "plot " + path.string() + " --out " + (dir / "plots").string(), message},
        Reader{"merge", "merge " + shard_path.string() + " " + (stories ? o.stories_shard1 : o.jamba_shard1).string() +
                            " --out " + (dir / "merged.json").string(),
               shard_message},
        Reader{"series", "compare " + series_path.string(), message}}) {
    SCOPED_TRACE(reader.name);
    const test::CommandResult r = test::run_qeval(reader.args);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(test::contains(r.output, reader.expected)) << "expected: " << reader.expected << "\ngot: " << r.output;
  }
}

json& scheme(json& record, const std::string& name) {
  for (json& s : record.at("schemes"))
    if (s.at("name") == name) return s;
  throw std::runtime_error("no scheme " + name);
}

// Renames a scheme entry and its timings.
void rename_scheme(json& record, const std::string& from, const std::string& to) {
  scheme(record, from)["name"] = to;
  json& timings = record.at("timings").at("schemes");
  timings[to] = timings.at(from);
  timings.erase(from);
}

void erase_scheme(json& record, const std::string& name) {
  json& list = record.at("schemes");
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i].at("name") == name) list.erase(i);
  record.at("timings").at("schemes").erase(name);
}

json& full_statistics(json& record) { return record.at("schemes").at(0).at("statistics"); }

// Sets every per-layer value of a section's list and its headline (their mean) to `v`.
void set_entropies(json& section, double v) {
  for (json& e : section.at("entropy_per_layer")) e = v;
  section["entropy"] = v;
}

// Rounding variants are their scheme's, with the run's ε: relabelling another scheme's variants
// (int8-moderate's spread made int8-coarse's band, its summary recomputed to match, widens a
// "band": 3 gate), orphaned, renamed, seeded twice, jittered with another ε or made variants of
// full precision, all refused.
TEST_F(ReaderAgreement, RoundingVariantsBelongToTheirScheme) {
  expect_every_reader_refuses("relabelled", Model::stories, [](json& r) {
    // int8-moderate's variants become int8-coarse's and the other way round, the summaries
    // recomputed to match: int8-coarse's band is then int8-moderate's spread.
    for (const char* seed : {"1", "2"}) {
      const std::string coarse = std::string("int8-coarse~r") + seed, moderate = std::string("int8-moderate~r") + seed;
      rename_scheme(r, coarse, "swap");
      rename_scheme(r, moderate, coarse);
      rename_scheme(r, "swap", moderate);
      scheme(r, coarse)["description"]["rounding_band_of"] = "int8-coarse";
      scheme(r, moderate)["description"]["rounding_band_of"] = "int8-moderate";
    }
    attach_rounding_bands(r);  // a careful forger makes the summaries match
  }, "scheme int8-moderate~r1: description differs from that of int8-moderate");
  expect_every_reader_refuses("orphaned", Model::stories, [](json& r) {
    rename_scheme(r, "int8-coarse~r2", "int8-fine~r2");
    scheme(r, "int8-fine~r2")["description"]["rounding_band_of"] = "int8-fine";
  }, "description.rounding_band_of is \"int8-fine\", which is no scheme of the record");
  expect_every_reader_refuses("renamed", Model::stories, [](json& r) { rename_scheme(r, "int8-coarse~r2", "int8-coarse~r7"); },
                              "a rounding variant of int8-coarse with rounding_seed 2 is named int8-coarse~r2");
  expect_every_reader_refuses("seed_twice", Model::stories, [](json& r) {
    scheme(r, "int8-coarse~r2")["description"]["rounding_seed"] = 1;
  }, "rounding_seed 1 is also that of another rounding variant of int8-coarse");
  expect_every_reader_refuses("other_eps", Model::stories, [](json& r) {
    scheme(r, "int8-moderate~r2")["description"]["rounding_eps"] = 1e-4;
  }, "scheme int8-moderate~r2: description.rounding_eps is 0.0001, but scheme int8-coarse~r1 has");
  expect_every_reader_refuses("of_full", Model::stories, [](json& r) {
    scheme(r, "int8-coarse~r2")["description"]["rounding_band_of"] = "full";
  }, "full precision has no rounding band");
}

// The band summary is the band its variants give: edited, deleted, or added where there are no
// variants, it is refused rather than silently recomputed.
TEST_F(ReaderAgreement, BandSummaryIsWhatItsVariantsGive) {
  expect_every_reader_refuses("band_edited", Model::stories, [](json& r) {
    json& band = scheme(r, "int8-coarse")["rounding_band"];
    band["dppl_sd"] = band["dppl_sd"].get<double>() * 1e5 + 1;
  }, "scheme int8-coarse: rounding_band.dppl_sd is");
  expect_every_reader_refuses("band_deleted", Model::stories, [](json& r) { scheme(r, "int8-coarse").erase("rounding_band"); },
                              "scheme int8-coarse has 2 rounding variants, but no rounding_band");
  expect_every_reader_refuses("band_added", Model::stories, [](json& r) {
    r["schemes"][0]["rounding_band"] = scheme(r, "int8-coarse")["rounding_band"];
  }, "scheme full has a rounding_band, but the record holds no rounding variant of it");
}

// Timings are measurements: finite, at least 0, the phases adding up to the total, each scheme's
// phases within the run's, and only the record's schemes.
TEST_F(ReaderAgreement, TimingsAreMeasurements) {
  expect_every_reader_refuses("negative", Model::stories, [](json& r) {
    json& t = r["timings"];
    t["phases"]["other"] = -1.0;
    t["total_s"] = t["total_s"].get<double>() - 1 - t["phases"]["other"].get<double>();
  }, "timings.phases.other is -1: a measured time is a finite number of seconds");
  expect_every_reader_refuses("huge", Model::stories, [](json& r) {
    r["timings"]["phases"]["other"] = 1e308;
    r["timings"]["total_s"] = 1e308;
  }, "timings.total_s is 1e+308");
  expect_every_reader_refuses("not_adding_up", Model::stories, [](json& r) {
    r["timings"]["phases"]["forward"] = r["timings"]["phases"]["forward"].get<double>() * 2 + 1;
  }, "but its phases add up to");
  expect_every_reader_refuses("forged_scheme", Model::stories, [](json& r) {
    r["timings"]["schemes"]["int8-fine"] = r["timings"]["schemes"]["int8-coarse"];
  }, "timings.schemes has \"int8-fine\", which is no scheme of the record");
  expect_every_reader_refuses("scheme_beyond_phase", Model::stories, [](json& r) {
    r["timings"]["schemes"]["int8-coarse"]["forward"] = r["timings"]["phases"]["forward"].get<double>() + 1;
  }, "timings.schemes spend");
  expect_every_reader_refuses("throughput", Model::stories, [](json& r) {
    json& t = scheme(r, "int8-coarse")["timing"];
    t["tokens_per_second"] = t["tokens_per_second"].get<double>() * 10;
  }, "scheme int8-coarse: timing: tokens_per_second × forward_seconds is");
}

// Entropies lie in [0, log L] with L the window length, and selection.entropy_max is log L.
TEST_F(ReaderAgreement, EntropiesLieWithinLogOfTheWindow) {
  const double log_l = std::log(64.0);
  expect_every_reader_refuses("attention_entropy", Model::stories, [&](json& r) {
    set_entropies(full_statistics(r)["attention"], log_l + 1);
  }, "scheme full: statistics.attention.entropy_per_layer[0] is 5.158883");
  expect_every_reader_refuses("entropy_max", Model::jamba, [](json& r) {
    full_statistics(r)["selection"]["entropy_max"] = std::log(1e6);
  }, "statistics.selection.entropy_max is 13.81551");
  expect_every_reader_refuses("selection_entropy", Model::jamba, [](json& r) {
    json& sel = full_statistics(r)["selection"];
    set_entropies(sel, 3.0);
    sel["entropy_max"] = 3.0;  // moved with them, as a forger would
  }, "statistics.selection.entropy_max is 3, but it is log L");
  expect_every_reader_refuses("implicit_entropy", Model::jamba, [](json& r) {
    set_entropies(full_statistics(r)["implicit_attention"], 3.0);
  }, "statistics.implicit_attention.entropy_per_layer[0] is 3, but an entropy lies in [0, log L]");
}

// Per-layer lists name each layer of the model's kind once: no layer twice, none out of range or
// fractional, no SSM section on an attention model, no attention layer left out.
TEST_F(ReaderAgreement, LayerListsNameEachLayerOfTheirKindOnce) {
  const std::int64_t n = originals->stories.at("model").at("config").at("n_layers").get<std::int64_t>();
  ASSERT_GE(n, 3);
  auto listed = [n](std::vector<json> head) {  // `head`, then the layers after it up to n
    json list = head;
    for (std::int64_t m = static_cast<std::int64_t>(head.size()); m < n; ++m) list.push_back(m);
    return list;
  };
  expect_every_reader_refuses("layer_twice", Model::stories, [&](json& r) {
    full_statistics(r)["attention"]["layers"] = listed({0, 0});
  }, "statistics.attention.layers lists layer 0 twice");
  expect_every_reader_refuses("layer_out_of_range", Model::stories, [&](json& r) {
    json list = listed({});
    list.back() = n;
    full_statistics(r)["attention"]["layers"] = list;
  }, "statistics.attention.layers[" + std::to_string(n - 1) + "] is " + std::to_string(n) + ", but the model has");
  expect_every_reader_refuses("layer_fraction", Model::stories, [&](json& r) {
    full_statistics(r)["attention"]["layers"] = listed({0.5});
  }, "statistics.attention.layers[0] should be an integer, found 0.5");
  expect_every_reader_refuses("ssm_grafted", Model::stories, [](json& r) {
    const json& jamba = originals->jamba.at("schemes").at(0).at("statistics");
    full_statistics(r)["implicit_attention"] = jamba.at("implicit_attention");
    full_statistics(r)["selection"] = jamba.at("selection");
  }, "statistics.implicit_attention.layers names layers [0, 2], but the model's Mamba / Mamba-2 layers are none");
  expect_every_reader_refuses("attention_layer_left_out", Model::jamba, [](json& r) {
    json& a = full_statistics(r)["attention"];
    a["layers"] = json::array({1});
    for (json* list : {&a["entropy_per_layer"], &a["per_layer"]["first_attn_pct"], &a["per_layer"]["first_token_share"],
                       &a["per_layer"]["sink_rate_pct"]})
      list->erase(1);
    for (const char* k : {"entropy", "first_attn_pct", "first_token_share", "sink_rate_pct"})
      a[k] = std::string(k) == "entropy" ? a["entropy_per_layer"][0] : a["per_layer"][k][0];
  }, "statistics.attention.layers names layers [1], but the model's attention layers are [1, 3]");
}

// The records these cases edit verify as written, through every reader.
TEST_F(ReaderAgreement, TheRecordsAsWrittenVerify) {
  const Originals& o = *originals;
  for (const fs::path& p : {o.stories_path, o.jamba_path}) {
    const test::CommandResult r = test::run_qeval("compare " + p.string());
    EXPECT_EQ(r.status, 0) << r.output;
  }
  EXPECT_TRUE(require_verified_record(o.stories, "s", false).empty());
  EXPECT_TRUE(require_verified_record(o.jamba, "j", false).empty());
}

}  // namespace
}  // namespace qeval

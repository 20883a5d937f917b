// Pictures like Kaul et al.'s Figure 1, rendered by gnuplot (Debian package gnuplot-nox,
// terminal pngcairo) from data files qeval writes. Each PNG keeps its inputs beside it, so a
// picture can be restyled and redrawn by hand (`cd DIR && gnuplot NAME.gp`):
//
//   layer_curves.{dat,gp,png}    per layer (1..M): kurtosis first/other tokens, max |activation|
//                                first/other tokens, %first-attn and Sink₁^ε rate — from a
//                                record's statistics (`qeval plot RECORD --out DIR`), or from
//                                several records on shared axes (`qeval plot A.json B.json ...`)
//   entropy_by_layer.{dat,gp,png}  SAMBA's Figure 5 (Ren et al. 2024) per layer (1..M), one colour
//                                per record: (a) attention entropy, attention layers solid with filled
//                                points and SSM layers' implicit-attention entropy dashed with open
//                                points on one x axis, (b) SSM layers' selection entropy — drawn by
//                                `qeval plot` when a record's scheme has per-layer entropies
//                                (reports/layer_entropy.h)
//   entropy_by_scheme.{dat,gp,png} the same two panels for one record, one colour per scheme with
//                                statistics — drawn when a single record has several
//   penalties.{dat,gp,png}       paired ΔNLL of every quantised scheme, ± se (sampling) and, where
//                                the record has rounding variants, ± band (rounding), one group of
//                                bars per record — drawn by `qeval plot` when a record has a band
//   kl_cdf.{dat,gp,png}          each quantised scheme's per-token KL percentiles (record: per_token)
//                                as a CDF on a log KL axis — drawn when a record has them
//   position_buckets.{dat,gp,png} paired ΔNLL ± se and mean KL by prediction position bucket
//                                (record: position_buckets), one line per scheme, log2 position axis
//   attention_map.{dat,gp,png}   mean attention over layers and heads, first T queries × keys
//   hidden_abs.{dat,gp,png}      mean |hidden state| per layer × channel, first token and the rest
//                                — the maps come from figure data (stats/figure_data.h), written as
//                                figure_data.json by `qeval eval --plots DIR`; `qeval plot
//                                RECORD --figure-data FILE` redraws them later
//
// The gnuplot executable is $QEVAL_GNUPLOT when set, else `gnuplot` on PATH.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

// Throws qeval::Error naming the Debian package when gnuplot cannot be found.
std::filesystem::path find_gnuplot();

// Runs `dir`/NAME.gp with gnuplot inside `dir` and checks that it wrote NAME.png (returned);
// gnuplot's messages go into the error.
std::filesystem::path render_gnuplot(const std::filesystem::path& dir, const std::string& name);
// A gnuplot single-quoted string literal (a quote inside is written twice, control bytes as
// visible escapes: no text can end the literal's line and start a command).
std::string gnuplot_quote(const std::string& s);
// Text for a gnuplot data file or a comment in a script: control bytes as visible escapes, so a
// name cannot start a line of its own (a forged data row or command).
std::string gnuplot_text(const std::string& s);

// Per-layer curves of `scheme`'s statistics in `record`; returns the PNGs written. Throws when
// the scheme has no statistics.
std::vector<std::filesystem::path> plot_layer_curves(const nlohmann::json& record, const std::filesystem::path& dir,
                                                     const std::string& scheme = "full");
// Several records on shared axes (e.g. an Adam model beside its OrthoAdam twin): one colour per
// record, its first token dashed and the other tokens solid; titled by record_model_name.
std::vector<std::filesystem::path> plot_layer_curves(const std::vector<nlohmann::json>& records,
                                                     const std::filesystem::path& dir, const std::string& scheme = "full");

// Whether any record's `scheme` ("full": else its first scheme) has per-layer entropies: attention,
// implicit attention or selection (reports/layer_entropy.h).
bool has_layer_entropies(const std::vector<nlohmann::json>& records, const std::string& scheme = "full");
// entropy_by_layer.png: each record's per-layer entropies of `scheme` (records without them are left
// out), and, for a single record with several schemes that have them, entropy_by_scheme.png; returns
// the PNGs written. A layer without its value is a gap; a layer of the other kind is passed over
// (the .dat writes '-': the curve goes on to the next layer of its kind). Throws when no record has
// per-layer entropies.
std::vector<std::filesystem::path> plot_layer_entropies(const std::vector<nlohmann::json>& records,
                                                        const std::filesystem::path& dir,
                                                        const std::string& scheme = "full");

// Whether any scheme of the record has rounding variants (eval --rounding-band).
bool has_rounding_band(const nlohmann::json& record);
// penalties.png: each record's quantised schemes (rounding variants folded into their scheme),
// paired ΔNLL as bars with ± se and ± the rounding band (records/rounding_band.h) beside it.
// Throws when no record has a quantised scheme with a paired ΔNLL.
std::filesystem::path plot_penalties(const std::vector<nlohmann::json>& records, const std::filesystem::path& dir);

// Whether any record's quantised scheme has KL percentiles or position buckets (issue 80).
bool has_token_tails(const std::vector<nlohmann::json>& records);
// kl_cdf.png and position_buckets.png, each when some scheme has its section; the PNGs written.
std::vector<std::filesystem::path> plot_token_tails(const std::vector<nlohmann::json>& records,
                                                    const std::filesystem::path& dir);

// How the maps colour their values: linear, or log (so a first-token sink or one massive
// channel does not wash out everything else; non-positive values are left blank).
enum class ColourScale { linear, log };
ColourScale parse_colour_scale(const std::string& s);  // throws listing linear, log

// The maps from figure data (FigureDataObserver::to_json()); `title` names the model.
std::vector<std::filesystem::path> plot_figure_maps(const nlohmann::json& figure_data, const std::filesystem::path& dir,
                                                    const std::string& title, ColourScale scale = ColourScale::linear);

// `qeval eval --plots DIR`: figure_data.json, the maps and the curves of the full-precision
// scheme (when it has statistics).
std::vector<std::filesystem::path> render_eval_plots(const nlohmann::json& record, const nlohmann::json& figure_data,
                                                     const std::filesystem::path& dir,
                                                     ColourScale scale = ColourScale::linear);

// A short name for the model of a record (file stem or folder name), used in titles; " (partial)"
// for a shard or a partial merge, and the record's "plot_mark" (set by `qeval plot` on a record of
// another protocol) after it.
std::string record_model_name(const nlohmann::json& record);
// Records' names as picture titles: record_model_name, with " [i]" (1-based position) added when
// two records share a name.
std::vector<std::string> unique_labels(const std::vector<nlohmann::json>& records);

}  // namespace qeval

// Per-layer entropies of a scheme's statistics, the numbers of SAMBA's Figure 5 (Ren et al. 2024):
// (a) attention entropy by layer, an attention layer's attention entropy beside an SSM layer's
// implicit-attention entropy, and (b) an SSM layer's selection entropy (the entropy of its Δ over
// the window, stats/statistics.h "selection"). Read from the statistics summary's sections
//   attention           "entropy_per_layer" over "layers" (absent: every layer 0..M-1 is attention)
//   implicit_attention  "entropy_per_layer" over "layers" (Mamba / Mamba-2 layers)
//   selection           "entropy_per_layer" over "layers" (Mamba / Mamba-2 layers), "entropy_max"
// and shown by `qeval compare` (the tables below) and `qeval plot` (reports/plot.h,
// entropy_by_layer.png and entropy_by_scheme.png). Tables and pictures number layers from 1, as
// the other per-layer pictures do; the record's "layers" lists are 0-based.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/compare.h"

namespace qeval {

enum class LayerKind { unknown, attention, ssm };

struct LayerEntropies {
  std::size_t layers = 0;          // M, the statistics' "layers"
  std::vector<LayerKind> kind;     // [M]: which section lists the layer (unknown: none does)
  std::vector<double> attention;   // [M] attention entropy, nats; NaN where the layer has none
  std::vector<double> implicit;    // [M] implicit-attention entropy of an SSM layer; NaN: none
  std::vector<double> selection;   // [M] selection entropy of an SSM layer; NaN: none
  double selection_max = NAN;      // selection.entropy_max: log of the window length (uniform selection)

  // The layer's attention entropy, or its implicit-attention one for an SSM layer (NaN: none).
  double entropy(std::size_t layer) const;
  // Whether any layer has a finite entropy of any kind.
  bool any() const;
};

// The statistics of `scheme` in `record`: the scheme of that name ("full": else the first scheme,
// the reference of vs_full); nullptr when there is no such scheme or it has no statistics.
const nlohmann::json* scheme_statistics(const nlohmann::json& record, const std::string& scheme);

// Reads a statistics summary's per-layer entropies. Throws qeval::Error naming `where` and the
// section when a "layers" list holds something other than distinct indices below M, when a list of
// per-layer entropies is not as long as its layers, or when a layer is listed as both attention and SSM.
LayerEntropies read_layer_entropies(const nlohmann::json& statistics, const std::string& where);

// "attention", "SSM", or "—" (no section lists the layer).
const char* layer_kind_name(LayerKind kind);

// `qeval compare`'s entropy tables (Markdown, each under a title line; empty when there is nothing to show):
//   "Entropy by layer": one row per layer (1-based) with its kind (one per record, joined by " / ",
//   where the records disagree), then per record its attention entropy (implicit-attention for an
//   SSM layer) and its selection entropy, of the scheme `scheme` ("full" by default), "—" where a
//   record lacks the layer or the value; drawn when any record has per-layer entropies.
//   "How each scheme moves each layer's entropy": only for a single record whose quantised schemes
//   have statistics: per layer the full-precision entropy and selection entropy, then each
//   quantised scheme's difference from them.
std::string entropy_tables_markdown(const std::vector<LabeledRecord>& records, const std::string& scheme = "full");

}  // namespace qeval

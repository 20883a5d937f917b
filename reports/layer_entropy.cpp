#include "reports/layer_entropy.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "records/rounding_band.h"

namespace qeval {
namespace {

using nlohmann::json;

// A record's statistics never list more layers than a model has; a forged "layers" must not make
// the report allocate without bound.
constexpr std::int64_t kMaxLayers = 1 << 20;

double number_or_nan(const json& v) { return v.is_number() ? v.get<double>() : NAN; }

// One section's entropy_per_layer, placed at the layers it lists (every layer when it lists none
// and `all_when_unlisted`: an all-attention model's "attention").
void read_section(const json& st, const char* key, LayerKind kind, bool all_when_unlisted, LayerEntropies& e,
                  std::vector<double>& out, const std::string& where) {
  if (!st.contains(key) || !st[key].is_object()) return;
  const json& section = st[key];
  const std::string at = where + ": statistics." + key;
  QEVAL_CHECK(section.contains("entropy_per_layer") && section["entropy_per_layer"].is_array(),
              "{}.entropy_per_layer should be a list of per-layer entropies", at);
  const json& values = section["entropy_per_layer"];
  std::vector<std::size_t> layers;
  if (section.contains("layers")) {
    QEVAL_CHECK(section["layers"].is_array(), "{}.layers should be a list of layer indices, found {}", at,
                json_text(section["layers"]));
    std::set<std::int64_t> seen;
    for (std::size_t i = 0; i < section["layers"].size(); ++i) {
      const std::int64_t m = json_integer(section["layers"][i], fmt::format("{}.layers[{}]", at, i));
      QEVAL_CHECK(m >= 0 && static_cast<std::size_t>(m) < e.layers, "{}.layers[{}] is {}, but the model has {} layers (0-based)",
                  at, i, m, e.layers);
      QEVAL_CHECK(seen.insert(m).second, "{}.layers lists layer {} twice", at, m);
      layers.push_back(static_cast<std::size_t>(m));
    }
  } else {
    QEVAL_CHECK(all_when_unlisted, "{} does not say which layers it covers (no \"layers\")", at);
    for (std::size_t m = 0; m < e.layers; ++m) layers.push_back(m);
  }
  QEVAL_CHECK(values.size() == layers.size(), "{}.entropy_per_layer has {} values for {} layers", at, values.size(),
              layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    LayerKind& k = e.kind[layers[i]];
    QEVAL_CHECK(k == LayerKind::unknown || k == kind, "{}: layer {} (0-based) is listed both as an attention layer and as "
                "an SSM layer", at, layers[i]);
    k = kind;
    out[layers[i]] = number_or_nan(values[i]);
  }
}

std::string value_cell(double v) { return std::isfinite(v) ? fmt::format("{:.3f}", v) : std::string("—"); }
std::string delta_cell(double v, double ref) {
  return std::isfinite(v) && std::isfinite(ref) ? fmt::format("{:+.4f}", v - ref) : std::string("—");
}

// A layer's kind across records: the one they share, else each record's joined by " / ".
std::string kind_cell(const std::vector<const LayerEntropies*>& all, std::size_t m) {
  std::vector<std::string> kinds;
  for (const LayerEntropies* e : all)
    kinds.push_back(e && m < e->layers ? layer_kind_name(e->kind[m]) : "—");
  if (std::all_of(kinds.begin(), kinds.end(), [&](const std::string& k) { return k == kinds.front(); }))
    return kinds.front();
  std::string out;
  for (const auto& k : kinds) out += (out.empty() ? "" : " / ") + k;
  return out;
}

// The selection entropy's upper bound: one number when the records agree, else one per record.
std::string selection_max_text(const std::vector<LabeledRecord>& records, const std::vector<const LayerEntropies*>& all) {
  std::vector<std::string> parts;
  std::set<std::string> values;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i] && std::isfinite(all[i]->selection_max)) {
      values.insert(fmt::format("{:.3f}", all[i]->selection_max));
      parts.push_back(fmt::format("{} {:.3f}", markdown_cell(records[i].label), all[i]->selection_max));
    }
  if (values.empty()) return "";
  if (values.size() == 1) return fmt::format(", at most log(window) = {} nats (uniform selection)", *values.begin());
  std::string joined;
  for (const auto& p : parts) joined += (joined.empty() ? "" : ", ") + p;
  return fmt::format(", at most log(window) ({}) nats (uniform selection)", joined);
}

std::string by_layer_table(const std::vector<LabeledRecord>& records, const std::string& scheme) {
  std::vector<LayerEntropies> read(records.size());
  std::vector<const LayerEntropies*> all(records.size(), nullptr);
  std::vector<std::string> lacking;
  std::size_t M = 0;
  bool any = false;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const json* st = scheme_statistics(records[i].record, scheme);
    if (!st) {
      lacking.push_back(markdown_cell(records[i].label));
      continue;
    }
    read[i] = read_layer_entropies(*st, fmt::format("{}: scheme '{}'", records[i].source, scheme));
    all[i] = &read[i];
    M = std::max(M, read[i].layers);
    any = any || read[i].any();
  }
  if (!any) return "";
  std::string out = fmt::format(
      "\nEntropy by layer (scheme {}, nats; SAMBA Fig. 5 layout: an attention layer's attention entropy or an SSM layer's "
      "implicit-attention entropy, and an SSM layer's selection entropy)\n\n| layer | kind |",
      markdown_cell(scheme));
  std::string rule = "|---:|---|";
  for (const auto& r : records) {
    out += fmt::format(" {} entropy | {} selection |", markdown_cell(r.label), markdown_cell(r.label));
    rule += "---:|---:|";
  }
  out += "\n" + rule + "\n";
  for (std::size_t m = 0; m < M; ++m) {
    out += fmt::format("| {} | {} |", m + 1, kind_cell(all, m));
    for (const LayerEntropies* e : all) {
      const bool has = e && m < e->layers;
      out += fmt::format(" {} | {} |", has ? value_cell(e->entropy(m)) : "—", has ? value_cell(e->selection[m]) : "—");
    }
    out += "\n";
  }
  out += fmt::format("\nLayers 1-based; entropy: attention entropy of an attention layer, implicit-attention entropy of an "
                     "SSM layer; selection: the selection entropy of an SSM layer's Δ{}; —: the record lacks the layer "
                     "or the value.\n",
                     selection_max_text(records, all));
  if (!lacking.empty()) {
    std::string names;
    for (const auto& n : lacking) names += (names.empty() ? "" : ", ") + n;
    out += fmt::format("No statistics for scheme {} in: {}.\n", markdown_cell(scheme), names);
  }
  return out;
}

// One record, each quantised scheme's entropies against full precision's, layer by layer.
std::string by_scheme_table(const LabeledRecord& r) {
  const json* ref_st = scheme_statistics(r.record, "full");
  if (!ref_st) return "";
  const LayerEntropies ref = read_layer_entropies(*ref_st, fmt::format("{}: scheme 'full'", r.source));
  if (!ref.any()) return "";
  std::vector<std::pair<std::string, LayerEntropies>> schemes;
  for (const auto& s : r.record.at("schemes")) {
    if (&s == &r.record.at("schemes").front() || is_rounding_variant(s)) continue;
    const std::string name = s.at("name").get<std::string>();
    if (name == "full" || !s.contains("statistics") || !s["statistics"].is_object()) continue;
    LayerEntropies e = read_layer_entropies(s["statistics"], fmt::format("{}: scheme '{}'", r.source, name));
    if (e.any()) schemes.emplace_back(name, std::move(e));
  }
  if (schemes.empty()) return "";
  std::string out = fmt::format("\nHow each scheme moves each layer's entropy ({}; Δ: the scheme's entropy minus full "
                                "precision's, nats)\n\n| layer | kind | full entropy | full selection |",
                                markdown_cell(r.label));
  std::string rule = "|---:|---|---:|---:|";
  for (const auto& [name, e] : schemes) {
    out += fmt::format(" {} Δentropy | {} Δselection |", markdown_cell(name), markdown_cell(name));
    rule += "---:|---:|";
  }
  out += "\n" + rule + "\n";
  for (std::size_t m = 0; m < ref.layers; ++m) {
    out += fmt::format("| {} | {} | {} | {} |", m + 1, layer_kind_name(ref.kind[m]), value_cell(ref.entropy(m)),
                       value_cell(ref.selection[m]));
    for (const auto& [name, e] : schemes) {
      const bool has = m < e.layers;
      out += fmt::format(" {} | {} |", has ? delta_cell(e.entropy(m), ref.entropy(m)) : "—",
                         has ? delta_cell(e.selection[m], ref.selection[m]) : "—");
    }
    out += "\n";
  }
  out += "\nLayers 1-based; —: the scheme or full precision lacks the value.\n";
  return out;
}

}  // namespace

double LayerEntropies::entropy(std::size_t layer) const {
  return std::isfinite(attention[layer]) ? attention[layer] : implicit[layer];
}

bool LayerEntropies::any() const {
  for (std::size_t m = 0; m < layers; ++m)
    if (std::isfinite(entropy(m)) || std::isfinite(selection[m])) return true;
  return false;
}

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::attention: return "attention";
    case LayerKind::ssm: return "SSM";
    case LayerKind::unknown: break;
  }
  return "—";
}

const json* scheme_statistics(const json& record, const std::string& scheme) {
  if (!record.contains("schemes") || !record["schemes"].is_array() || record["schemes"].empty()) return nullptr;
  const json* entry = nullptr;
  for (const auto& s : record["schemes"])
    if (s.is_object() && s.value("name", json(nullptr)) == scheme) entry = &s;
  if (!entry && scheme == "full") entry = &record["schemes"].front();
  if (!entry || !entry->is_object() || !entry->contains("statistics") || !(*entry)["statistics"].is_object()) return nullptr;
  return &(*entry)["statistics"];
}

LayerEntropies read_layer_entropies(const json& st, const std::string& where) {
  LayerEntropies e;
  QEVAL_CHECK(st.contains("layers"), "{}: statistics have no \"layers\"", where);
  const std::int64_t M = json_integer(st["layers"], where + ": statistics.layers");
  QEVAL_CHECK(M >= 1 && M <= kMaxLayers, "{}: statistics.layers is {}, expected 1 to {}", where, M, kMaxLayers);
  e.layers = static_cast<std::size_t>(M);
  e.kind.assign(e.layers, LayerKind::unknown);
  e.attention.assign(e.layers, NAN);
  e.implicit.assign(e.layers, NAN);
  e.selection.assign(e.layers, NAN);
  read_section(st, "attention", LayerKind::attention, true, e, e.attention, where);
  read_section(st, "implicit_attention", LayerKind::ssm, false, e, e.implicit, where);
  read_section(st, "selection", LayerKind::ssm, false, e, e.selection, where);
  if (st.contains("selection") && st["selection"].is_object())
    e.selection_max = number_or_nan(st["selection"].value("entropy_max", json(nullptr)));
  return e;
}

std::string entropy_tables_markdown(const std::vector<LabeledRecord>& records, const std::string& scheme) {
  std::string out = by_layer_table(records, scheme);
  if (records.size() == 1) out += by_scheme_table(records.front());
  return out;
}

}  // namespace qeval

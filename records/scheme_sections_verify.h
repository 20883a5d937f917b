// What a scheme's description says of itself, verified against its own spec (records/record_verify.h
// calls this for every scheme of every record it reads). A record's per-window rows are checked
// elsewhere; this file holds the sections that schemes add to their description:
//   - "scheme": the resolved spec parses and validates; a scheme shown under a preset's name (not a
//     scheme file's, not a rounding variant) is that preset, with only the run's options applied
//     (--quantize-lm-head, --quantize-ssm-inner) — so `compare` can take a family from the spec;
//   - "static_scales": present exactly when the spec's input activations are static; its statistic,
//     window count and kept positions are the spec's; its calibration windows are distinct and, on
//     the evaluation's own data (by name or by hash), none shares a stream token with an evaluated
//     window (compared as stream ranges: --calibration-seq-len makes them of another length); every layer is one the spec selects,
//     once, with a finite amax >= 0 and the scale the spec derives from it, bit for bit;
//   - "calibrated_weights": present exactly when the spec's weights are calibrated (GPTQ, AWQ), with
//     the spec's method; its window count is the spec's, its windows distinct and none evaluated (as
//     static_scales'), every layer one the spec selects, once (GPTQ: with a finite loss >= 0; AWQ:
//     each mapping with finite losses >= 0, the chosen one no larger than the first, or skipped with why);
//   - "kv_cache_error": present exactly when the spec quantises the KV cache, with the spec's format,
//     kept positions and rotation; one row per attention layer of the model, over the record's
//     windows, each error finite, >= 0, at most 2·sqrt(head_dim) (no round trip moves a value by
//     more than twice its row's largest magnitude) and 0 at a kept position; "mean" their mean;
//   - "layers": byte counts are positive, fp32 bytes are 4 per weight, and under a llama.cpp scheme
//     every tensor's ggml_type is a type qeval knows, divides the tensor's rows, costs the bytes the
//     type gives, and is the type llama-quantize's rules choose for that tensor of that model.
// Checks that need the model's shape (layers, head_dim, the ggml rules) run when the record carries
// its resolved config.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace qeval {

// Throws qeval::Error naming `source`, the scheme, the key path, what was expected and found.
// `evaluated`: the window indices the record's rows hold.
void verify_scheme_sections(const nlohmann::json& record, const std::set<std::int64_t>& evaluated,
                            const std::string& source);

}  // namespace qeval

// The rounding band (issue 53): how far a scheme's penalty moves when only the rounding of its
// float arithmetic changes. `eval --rounding-band K` adds, for each quantised scheme, K variants
// that differ from it in one thing: every input of a quantised linear (the LM head's too, when
// --quantize-lm-head quantises it) is multiplied element-wise by (1 + ε·u), u uniform in [−1, 1]
// from a generator seeded by (variant seed, window, linear), with ε a few float32 ulps (default
// 2⁻²²). Any float32 implementation of the layers upstream (another summation order, a fused
// kernel, another BLAS) moves these inputs by as much, so each variant is as valid an
// implementation of the scheme as the default; the spread of the variants' penalties is the band.
// The quantisers then see scales and values that moved by ulps, and every value within that
// distance of a rounding boundary may round the other way: the noise that a change of summation
// order shows (docs/rounding-band.md has the measurements, and qeval's own float64 evaluation as
// the other implementation they are checked against).
//
// The variants run in the same pass as everything else, as ordinary schemes named
// "<scheme>~r<seed>" whose description says "rounding_band_of" (so shards, --resume and merge
// keep them exact, window by window); full precision is never repeated. records/rounding_band.h
// folds them into their scheme's band.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "quant/rewrite.h"

namespace qeval {

inline constexpr double kDefaultRoundingEps = 1.0 / (1 << 22);  // 2⁻²²: two ulps of 1.0 in float32

// The variant of a quantised scheme for seed `seed` (1, 2, ...): the scheme's rewrite (a fresh
// SchemeRewrite of `spec`, so its report is its own), each of its quantised linears behind a
// jitter of its inputs, no statistics.
EvalScheme rounding_variant(const EvalScheme& scheme, const SchemeSpec& spec, const std::vector<std::string>& linears,
                            const ModelConfig& config, std::uint64_t seed, double eps,
                            std::shared_ptr<SchemeRewrite>& rewrite_out);

// Puts `scheme`'s quantised linears, and the K and V its quantised cache reads (issue 62), behind
// the input jitter of `seed` (after its own wrap_block, beside its own begin_batch): the scheme evaluated as another, equally valid implementation
// (`eval --rounding-seed S`, which gates use to see a penalty move by rounding alone).
void jitter_quantised_inputs(EvalScheme& scheme, std::uint64_t seed, double eps);

// The largest ε that moves no input of a quantised linear computed in `dtype`: the jitter factor
// 1 + ε·u (|u| <= 1) is computed in that dtype, and rounds to 1 for every u while ε·|u| is at
// most half the dtype's spacing below 1.0 (float32: 2^-25; float64: 2^-54; float16: 2^-12;
// bfloat16: 2^-9). An ε at or below it makes every variant the scheme itself: a band of exactly 0
// that measured nothing.
double rounding_eps_floor(at::ScalarType dtype);
// Throws, naming `option`, the dtype and the smallest ε that moves inputs, when `eps` moves none.
void check_rounding_eps(double eps, at::ScalarType dtype, const std::string& option = "--rounding-band-eps");

// "int8-moderate~r3".
std::string rounding_variant_name(const std::string& scheme, std::uint64_t seed);

}  // namespace qeval

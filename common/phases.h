// Where a run's wall time goes (DESIGN.md §12): every stretch of the calling thread's time is
// charged to exactly one phase, so the phases of a run add up to its total.
//
//   PhaseScope scope(Phase::read);            // this thread is reading until the scope ends
//   PhaseScope quantise(Phase::quantize, s);  // per-scheme phases carry the scheme's index
//
// Scopes nest, and the innermost one is charged: entering one pauses the one around it (a read
// inside a rewrite is read, not quantisation), and leaving it resumes the outer one. Time outside
// any scope is charged to Phase::other. The accounting is per thread: work a helper thread does
// while the main thread computes (the GPU plans' prefetch of the next layer) is not counted twice;
// the main thread's wait for it is charged to the phase it waits in.
//
// The clock is the host's steady clock. Work on a GPU is asynchronous, so a GPU evaluation holds a
// PhaseDeviceSync on its thread: every phase boundary then waits for the device first, and each
// stretch is charged the device time of the work queued in it (DESIGN.md §12: the cost is one
// synchronisation per boundary, a few per layer and scheme, against layers that compute for
// milliseconds).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

enum class Phase {
  read,        // file to memory: tensor bytes, embedding rows, header parsing at open
  convert,     // F16 / BF16 / GGUF blocks to the compute dtype
  hash,        // the weights hash (every byte of the weight files)
  data,        // text to scored windows: reading documents, tokenising, cutting
  transform,   // rotate / smooth, with their calibration
  quantize,    // a scheme's linears rewritten from full precision (per scheme)
  copy,        // host to device
  forward,     // blocks' forward passes (per scheme)
  statistics,  // observers: hidden-state and attention statistics, figure data (per scheme)
  head,        // final norm, LM head and scoring against full precision (per scheme)
  calibrate,   // calibrated weight quantisers' passes over their calibration windows (GPTQ's Hessians)
  solve,       // calibrated weight quantisers' solves (GPTQ, one linear at a time)
  other,       // everything outside a scope: set-up, checks, records, progress
};
inline constexpr std::size_t kPhaseCount = static_cast<std::size_t>(Phase::other) + 1;
const char* phase_name(Phase p);

// Seconds by phase, and by (phase, scheme) for the phases given a scheme.
struct PhaseTimes {
  std::array<double, kPhaseCount> seconds{};
  std::map<std::pair<Phase, int>, double> by_scheme;
  double total() const;
  PhaseTimes& operator+=(const PhaseTimes& other);
  PhaseTimes operator-(const PhaseTimes& earlier) const;
  // {"total_s", "phases": {name: s}, "schemes": {name: {phase: s}}} with `scheme_names[i]` naming
  // scheme i; phases that took no time are written as 0 (every name is always there).
  nlohmann::json to_json(const std::vector<std::string>& scheme_names) const;
  // The phases, largest first (ties in phase order).
  std::vector<Phase> largest_first() const;
  // One line: "read 1.2 s · convert 0.3 s · quantize 2.1 s · forward 9.8 s · ..." (the phases
  // that took at least 0.05 s, largest share first), for the end of a run.
  std::string summary_line() const;
};

// The scheme a scope charges: an index, none, or (the default) that of the scope around it, so
// that work done for a scheme deep in the model (statistics an observer asked for) is its own.
inline constexpr int kNoScheme = -1;
inline constexpr int kOuterScheme = -2;

class PhaseScope {
 public:
  explicit PhaseScope(Phase phase, int scheme = kOuterScheme);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase outer_phase_;
  int outer_scheme_;
};

// While it lives, this thread's phase boundaries call `wait_for_device` (a device synchronisation)
// before reading the clock.
class PhaseDeviceSync {
 public:
  explicit PhaseDeviceSync(std::function<void()> wait_for_device);
  ~PhaseDeviceSync();
  PhaseDeviceSync(const PhaseDeviceSync&) = delete;
  PhaseDeviceSync& operator=(const PhaseDeviceSync&) = delete;

 private:
  std::function<void()> previous_;
};

// This thread's times so far, the running scope's time included (take two and subtract to time a
// stretch), and the phase it is in now (for the progress line).
PhaseTimes thread_phase_times();
Phase current_phase();

}  // namespace qeval

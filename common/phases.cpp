#include "common/phases.h"

#include <fmt/format.h>

#include <algorithm>

namespace qeval {
namespace {

using Clock = std::chrono::steady_clock;

// The calling thread's account: the phase it is in since `since`, and what earlier stretches added.
struct ThreadAccount {
  PhaseTimes times;
  Phase phase = Phase::other;
  int scheme = -1;
  Clock::time_point since = Clock::now();
  std::function<void()> wait_for_device;  // PhaseDeviceSync's, when set

  // Charges the stretch since `since` to the current phase and starts a new one now.
  void settle() {
    if (wait_for_device) wait_for_device();
    const Clock::time_point now = Clock::now();
    const double s = std::chrono::duration<double>(now - since).count();
    times.seconds[static_cast<std::size_t>(phase)] += s;
    if (scheme >= 0) times.by_scheme[{phase, scheme}] += s;
    since = now;
  }
};

ThreadAccount& account() {
  thread_local ThreadAccount a;
  return a;
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::read: return "read";
    case Phase::convert: return "convert";
    case Phase::hash: return "hash";
    case Phase::data: return "data";
    case Phase::transform: return "transform";
    case Phase::calibrate: return "calibrate";
    case Phase::solve: return "solve";
    case Phase::quantize: return "quantize";
    case Phase::copy: return "copy";
    case Phase::forward: return "forward";
    case Phase::statistics: return "statistics";
    case Phase::head: return "head";
    case Phase::other: return "other";
  }
  return "other";
}

double PhaseTimes::total() const {
  double t = 0;
  for (double s : seconds) t += s;
  return t;
}

PhaseTimes& PhaseTimes::operator+=(const PhaseTimes& o) {
  for (std::size_t i = 0; i < kPhaseCount; ++i) seconds[i] += o.seconds[i];
  for (const auto& [key, s] : o.by_scheme) by_scheme[key] += s;
  return *this;
}

PhaseTimes PhaseTimes::operator-(const PhaseTimes& earlier) const {
  PhaseTimes d = *this;
  for (std::size_t i = 0; i < kPhaseCount; ++i) d.seconds[i] -= earlier.seconds[i];
  for (const auto& [key, s] : earlier.by_scheme) d.by_scheme[key] -= s;
  return d;
}

nlohmann::json PhaseTimes::to_json(const std::vector<std::string>& scheme_names) const {
  nlohmann::json phases = nlohmann::json::object();
  for (std::size_t i = 0; i < kPhaseCount; ++i) phases[phase_name(static_cast<Phase>(i))] = seconds[i];
  nlohmann::json schemes = nlohmann::json::object();
  for (std::size_t s = 0; s < scheme_names.size(); ++s) {
    nlohmann::json one = nlohmann::json::object();
    for (Phase p : {Phase::quantize, Phase::forward, Phase::statistics, Phase::head}) {
      const auto it = by_scheme.find({p, static_cast<int>(s)});
      one[phase_name(p)] = it == by_scheme.end() ? 0.0 : it->second;
    }
    // Reading is the run's, not a scheme's, except for a scheme that reads a checkpoint of its own
    // (an artifact beside its parent, eval/artifact_scheme.h): its reading and dequantisation.
    // Its conversion of stored floats (F16 / BF16 embedding and norms) likewise.
    for (Phase p : {Phase::read, Phase::convert})
      if (const auto it = by_scheme.find({p, static_cast<int>(s)}); it != by_scheme.end() && it->second > 0)
        one[phase_name(p)] = it->second;
    schemes[scheme_names[s]] = one;
  }
  return {{"total_s", total()}, {"phases", phases}, {"schemes", schemes}};
}

std::vector<Phase> PhaseTimes::largest_first() const {
  std::vector<Phase> order;
  for (std::size_t i = 0; i < kPhaseCount; ++i) order.push_back(static_cast<Phase>(i));
  std::stable_sort(order.begin(), order.end(), [&](Phase a, Phase b) {
    return seconds[static_cast<std::size_t>(a)] > seconds[static_cast<std::size_t>(b)];
  });
  return order;
}

std::string PhaseTimes::summary_line() const {
  std::string line;
  const double all = total();
  for (Phase p : largest_first()) {
    const std::size_t i = static_cast<std::size_t>(p);
    if (seconds[i] < 0.05) continue;
    line += fmt::format("{}{} {:.1f} s ({:.0f} %)", line.empty() ? "" : " · ", phase_name(p),
                        seconds[i], all > 0 ? 100 * seconds[i] / all : 0.0);
  }
  return fmt::format("{:.1f} s: {}", all, line.empty() ? std::string("nothing measured") : line);
}

PhaseScope::PhaseScope(Phase phase, int scheme) {
  ThreadAccount& a = account();
  a.settle();
  outer_phase_ = a.phase;
  outer_scheme_ = a.scheme;
  a.phase = phase;
  a.scheme = scheme == kOuterScheme ? outer_scheme_ : scheme;
}

PhaseScope::~PhaseScope() {
  ThreadAccount& a = account();
  a.settle();
  a.phase = outer_phase_;
  a.scheme = outer_scheme_;
}

PhaseTimes thread_phase_times() {
  ThreadAccount& a = account();
  a.settle();
  return a.times;
}

Phase current_phase() { return account().phase; }

PhaseDeviceSync::PhaseDeviceSync(std::function<void()> wait_for_device) {
  ThreadAccount& a = account();
  previous_ = std::move(a.wait_for_device);
  a.wait_for_device = std::move(wait_for_device);
}

PhaseDeviceSync::~PhaseDeviceSync() { account().wait_for_device = std::move(previous_); }

}  // namespace qeval

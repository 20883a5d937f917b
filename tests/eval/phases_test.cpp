// Phase accounting (common/phases.h): nested scopes charge only the innermost phase, a scheme's
// scope passes its index to the scopes inside it, and the phases of a stretch add up to its wall
// time; the record's timings from a real run follow the same rule (tests/cli/cli_test.cpp).
#include "common/phases.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace qeval {
namespace {

void busy_for(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
  }
}

// Durations are compared with the same steady clock read at the scopes' edges, never with upper
// bounds on how long a busy loop took: a loaded machine (ctest --parallel) preempts the loops.
double since(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

TEST(Phases, NestedScopesChargeTheInnermostPhaseAndAddUpToTheWall) {
  using Clock = std::chrono::steady_clock;
  const PhaseTimes start = thread_phase_times();
  const auto t0 = Clock::now();
  Clock::time_point t1, t2;
  {
    PhaseScope quantize(Phase::quantize, 2);
    busy_for(0.02);
    t1 = Clock::now();
    {
      PhaseScope read(Phase::read);  // a read inside a rewrite is read, charged to scheme 2's account
      busy_for(0.03);
      EXPECT_EQ(current_phase(), Phase::read);
    }
    t2 = Clock::now();
    EXPECT_EQ(current_phase(), Phase::quantize);
    busy_for(0.01);
  }
  const auto t3 = Clock::now();
  busy_for(0.01);  // outside every scope: other
  const PhaseTimes d = thread_phase_times() - start;
  const double quantize = d.seconds[static_cast<std::size_t>(Phase::quantize)];
  const double read = d.seconds[static_cast<std::size_t>(Phase::read)];
  EXPECT_NEAR(read, since(t1, t2), 0.002);                            // the inner scope, only there
  EXPECT_NEAR(quantize, since(t0, t3) - since(t1, t2), 0.002);        // the outer one without the inner
  EXPECT_GE(read, 0.03);
  EXPECT_GE(quantize, 0.03);
  EXPECT_GE(d.seconds[static_cast<std::size_t>(Phase::other)], 0.01);
  EXPECT_NEAR(d.by_scheme.at({Phase::quantize, 2}), quantize, 1e-12);
  const nlohmann::json j = d.to_json({"full", "a", "b"});
  EXPECT_NEAR(j.at("schemes").at("b").at("quantize").get<double>(), quantize, 1e-12);
  EXPECT_EQ(j.at("schemes").at("full").at("forward").get<double>(), 0.0);
  double sum = 0;
  for (const auto& [name, seconds] : j.at("phases").items()) sum += seconds.get<double>();
  EXPECT_NEAR(sum, j.at("total_s").get<double>(), 1e-9);  // every stretch charged once
  EXPECT_EQ(j.at("phases").size(), kPhaseCount);
}

TEST(Phases, OtherThreadsKeepTheirOwnAccount) {
  const PhaseTimes start = thread_phase_times();
  {
    PhaseScope wait(Phase::convert, kNoScheme);  // this thread's wait is charged where it waits
    std::thread helper([] {
      PhaseScope read(Phase::read, kNoScheme);
      busy_for(0.03);
    });
    helper.join();
  }
  const PhaseTimes d = thread_phase_times() - start;
  EXPECT_EQ(d.seconds[static_cast<std::size_t>(Phase::read)], 0.0);
  EXPECT_GE(d.seconds[static_cast<std::size_t>(Phase::convert)], 0.03);
  for (const auto& [key, seconds] : d.by_scheme) EXPECT_EQ(seconds, 0.0) << phase_name(key.first) << " " << key.second;
}

// A GPU evaluation's wait for the device (PhaseDeviceSync) runs at every phase boundary of its
// thread, before the clock is read, so the wait is charged to the phase whose work it finishes;
// it ends with its scope, and other threads never run it.
TEST(Phases, DeviceWaitRunsAtEveryBoundaryAndIsChargedToThePhaseItFinishes) {
  int waits = 0;
  const PhaseTimes before = thread_phase_times();
  {
    PhaseDeviceSync sync([&waits] {
      ++waits;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));  // "the device finishing"
    });
    const int at_start = waits;
    {
      PhaseScope forward(Phase::forward);  // 1 boundary entering
    }                                      // 1 leaving: its wait finishes forward's work
    EXPECT_EQ(waits - at_start, 2);
    int other_thread_waits = 0;
    std::thread([&] {
      PhaseScope read(Phase::read);
      other_thread_waits = waits;
    }).join();
    EXPECT_EQ(other_thread_waits, waits) << "another thread ran this thread's device wait";
  }
  const int after_scope = waits;
  { PhaseScope head(Phase::head); }
  EXPECT_EQ(waits, after_scope) << "the wait outlived its PhaseDeviceSync";
  const PhaseTimes spent = thread_phase_times() - before;
  EXPECT_GE(spent.seconds[static_cast<std::size_t>(Phase::forward)], 0.025);  // the leaving wait
}

}  // namespace
}  // namespace qeval

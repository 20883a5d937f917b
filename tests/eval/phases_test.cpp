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

TEST(Phases, NestedScopesChargeTheInnermostPhaseAndAddUpToTheWall) {
  const auto wall_start = std::chrono::steady_clock::now();
  const PhaseTimes start = thread_phase_times();
  {
    PhaseScope quantize(Phase::quantize, 2);
    busy_for(0.02);
    {
      PhaseScope read(Phase::read);  // a read inside a rewrite is read, charged to scheme 2's account
      busy_for(0.03);
      EXPECT_EQ(current_phase(), Phase::read);
    }
    EXPECT_EQ(current_phase(), Phase::quantize);
    busy_for(0.01);
  }
  busy_for(0.01);  // outside every scope: other
  const PhaseTimes d = thread_phase_times() - start;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  EXPECT_GE(d.seconds[static_cast<std::size_t>(Phase::quantize)], 0.03);
  EXPECT_LT(d.seconds[static_cast<std::size_t>(Phase::quantize)], 0.03 + 0.02);
  EXPECT_GE(d.seconds[static_cast<std::size_t>(Phase::read)], 0.03);
  EXPECT_LT(d.seconds[static_cast<std::size_t>(Phase::read)], 0.03 + 0.02);
  EXPECT_GE(d.seconds[static_cast<std::size_t>(Phase::other)], 0.01);
  EXPECT_NEAR(d.total(), wall, 0.005);  // every stretch charged once
  EXPECT_NEAR(d.by_scheme.at({Phase::quantize, 2}), d.seconds[static_cast<std::size_t>(Phase::quantize)], 1e-12);
  const nlohmann::json j = d.to_json({"full", "a", "b"});
  EXPECT_NEAR(j.at("schemes").at("b").at("quantize").get<double>(), d.by_scheme.at({Phase::quantize, 2}), 1e-12);
  EXPECT_EQ(j.at("schemes").at("full").at("forward").get<double>(), 0.0);
  double sum = 0;
  for (const auto& [name, s] : j.at("phases").items()) sum += s.get<double>();
  EXPECT_NEAR(sum, j.at("total_s").get<double>(), 1e-9);
  EXPECT_EQ(j.at("phases").size(), kPhaseCount);
}

TEST(Phases, OtherThreadsKeepTheirOwnAccount) {
  const PhaseTimes start = thread_phase_times();
  std::thread helper([] {
    PhaseScope read(Phase::read, kNoScheme);
    busy_for(0.03);
  });
  {
    PhaseScope wait(Phase::convert, kNoScheme);  // this thread's wait is charged where it waits
    helper.join();
  }
  const PhaseTimes d = thread_phase_times() - start;
  EXPECT_EQ(d.seconds[static_cast<std::size_t>(Phase::read)], 0.0);
  EXPECT_GE(d.seconds[static_cast<std::size_t>(Phase::convert)], 0.02);
  for (const auto& [key, seconds] : d.by_scheme) EXPECT_EQ(seconds, 0.0) << phase_name(key.first) << " " << key.second;
}

}  // namespace
}  // namespace qeval

// Progress on stderr: windows done, ETA and a running PPL. Results never go here.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace qeval {

class Progress {
 public:
  // total: expected number of windows (0 when unknown).
  Progress(bool enabled, std::int64_t total);
  void update(std::int64_t done, double running_ppl, std::int64_t tokens);
  // Within a chunk of windows (layer-major evaluation): `done` windows' worth of work so far
  // (fractional), and where the chunk is ("layer 12/32"), for the ETA.
  void update_partial(double done, const std::string& where);
  void finish();

 private:
  bool enabled_;
  bool tty_;
  std::int64_t total_;
  std::chrono::steady_clock::time_point start_, last_print_;
};

}  // namespace qeval

#!/usr/bin/env bash
# Times the Release build of the qeval binary alone, as scripts/demo makes it, from a fresh clone
# with ccache off: configure + build, CPU seconds (user + sys, the figure to compare: the wall time
# moves with whatever else the machine runs), wall time, the load average every 20 s, and the 15
# slowest build steps from ninja's log.
#   results/build-time/run.sh NAME [COMMIT] [-D...]   NAME: where the figures go (results/build-time/NAME.*)
# Extra -D arguments go to the configure after scripts/demo's (e.g. -DQEVAL_UNITY=OFF); a commit
# older than QEVAL_UNITY ignores that switch (CMake warns that it was not used).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
name="$1"; shift
commit=HEAD
if (($#)) && [[ "$1" != -D* ]]; then commit="$1"; shift; fi
clone="$(mktemp -d /tmp/qeval-build-time.XXXXXX)"
trap 'rm -rf "$clone"' EXIT
git clone -q "$root" "$clone/qeval"
git -C "$clone/qeval" checkout -q "$commit"
out="$here/$name"
{
  echo "commit $(git -C "$clone/qeval" rev-parse --short=12 HEAD)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core)'
  grep -o -w -E 'avx2|avx512f|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  echo "g++ $(g++ -dumpfullversion), cmake $(cmake --version | head -1 | cut -d' ' -f3), ninja $(ninja --version)"
  echo "configure: -DQEVAL_WITH_CUDA=OFF -DQEVAL_PCH=ON -DQEVAL_UNITY=ON $*"
} > "$out.machine"
(while :; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 20; done) > "$out.load" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null; rm -rf "$clone"' EXIT
# What scripts/demo runs, on its build folder (QEVAL_UNITY and QEVAL_PCH as it sets them).
(cd "$clone/qeval" && CCACHE_DISABLE=1 QEVAL_BUILD_DIR="$clone/qeval/build" /usr/bin/time -v -o "$out.time" \
  env QEVAL_TARGETS=qeval scripts/build -DQEVAL_WITH_CUDA=OFF -DQEVAL_PCH=ON -DQEVAL_UNITY=ON "$@" > "$out.build-log" 2>&1)
awk 'NR > 1 { printf "%7.1f s  %s\n", ($2 - $1) / 1000, $4 }' "$clone/qeval/build/.ninja_log" | sort -rn | head -15 > "$out.slowest"
awk -F': ' '/User time/ { u = $2 } /System time/ { s = $2 } /Elapsed/ { w = $2 }
  END { printf "user+sys %.0f s (user %.0f, sys %.0f), wall %s\n", u + s, u, s, w }' "$out.time" | tee "$out.summary"
awk '{ n++; s += $2 } END { printf "load average (1 min) during the build: mean %.1f over %d samples\n", s / n, n }' "$out.load" | tee -a "$out.summary"

#!/usr/bin/env bash
# ctest `slurm`: configs/cluster/slurm-shards.sbatch run as it is under a real Slurm scheduler.
#
# First, without Slurm: tests/cluster/slurm_script_test.sh, the sbatch file's checks of its
# environment and arguments (numbers as decimal data, options it sets refused when given again,
# no finished record of another layout overwritten), with a stub qeval; a failure there fails this
# test wherever it runs, even where the Slurm part below reports skipped.
#
# Then it brings up a one-node Slurm cluster in a temporary folder: Debian's slurm-wlm and munge
# (installed with apt-get when missing), munged, slurmctld and slurmd started directly as daemons
# (no systemd) with a generated slurm.conf whose node is this machine as `slurmd -C` sees it, on
# free ports, so nothing outside the folder is touched; stopped on exit whatever happens. Then, on
# stories260K (../shared/data):
#   1. one process evaluates the windows (the reference record);
#   2. the sbatch file runs as a job array of 4 shards, merged by the dependent job the sbatch
#      file documents; the merged record's results must equal the reference's bit for bit;
#   3. again, but one array task is cancelled (scancel) once it has saved its state, then
#      resubmitted alone; it must say it resumed from its state file, and the merge must again
#      equal the reference.
# Prints the job ids, each task's state and the comparisons. Exits 77 (SKIP_RETURN_CODE in
# tests/CMakeLists.txt) when Slurm cannot be installed or started (not root, no apt-get, a daemon
# that does not come up); any other non-zero status is a failure.
#
# Usage: slurm_test.sh QEVAL_BINARY
# Environment: QEVAL_SLURM_KEEP=1 keeps the temporary folder (logs, records, slurm.conf).
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 QEVAL_BINARY" >&2; exit 2; }
root="$(cd "$(dirname "$0")/../.." && pwd)"
sbatch_file="$root/configs/cluster/slurm-shards.sbatch"

SKIP=77
skip() { echo "SKIPPED: $*"; exit "$SKIP"; }
fail() { echo "FAIL: $*"; exit 1; }
say() { echo "== $*"; }
test_start=$SECONDS

say "the sbatch file's checks of its environment and arguments (stub qeval, no Slurm)"
"$root/tests/cluster/slurm_script_test.sh" "$sbatch_file" || fail "the sbatch file's checks above"

[[ -x "$1" ]] || fail "no qeval binary at $1"
qeval="$(realpath "$1")"

# --- Slurm and munge: installed here when missing (CI starts from a fresh Debian) --------------
need=(munged slurmctld slurmd sbatch squeue scancel scontrol sinfo)
missing() { local c; for c in "${need[@]}"; do command -v "$c" >/dev/null || return 0; done; return 1; }
((EUID == 0)) || skip "not root: Slurm's daemons (slurmd runs jobs as their user) need root to start"
if missing; then
  command -v apt-get >/dev/null || skip "Slurm is not installed and there is no apt-get to install it"
  say "installing slurm-wlm and munge (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d: the packages' scripts must not try to start services (no init here; the test
  # starts its own daemons). Removed again whatever happens.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1; fi
  set +e
  timeout 150 apt-get -o DPkg::Lock::Timeout=120 -qq update >/dev/null &&
    timeout 300 apt-get -o DPkg::Lock::Timeout=120 -qq install -y --no-install-recommends slurm-wlm munge >/dev/null
  rc=$?
  set -e
  ((own_policy)) && rm -f "$policy"
  ((rc == 0)) || skip "apt-get could not install slurm-wlm and munge (exit $rc)"
  missing && skip "slurm-wlm and munge installed, yet one of ${need[*]} is not on PATH"
  say "installed in $((SECONDS - test_start)) s"
fi
command -v python3 >/dev/null || fail "python3 is needed to compare the records"

# From here on every wait is bounded, and all of it (cluster, 9 evaluations, 2 merges) must end
# within this many seconds.
budget=${QEVAL_SLURM_TEST_SECONDS:-270}
deadline=$((SECONDS + budget))
left() { echo $((deadline - SECONDS)); }

# --- The cluster: a temporary folder, stopped and removed on exit ------------------------------
tmp="$(mktemp -d /tmp/qeval-slurm.XXXXXX)"
chmod 0755 "$tmp"
conf="$tmp/slurm.conf"
export SLURM_CONF="$conf"
# A copy of the binary: a build relinking it while the jobs run cannot pull it away.
cp "$qeval" "$tmp/qeval"
qeval="$tmp/qeval"
# Everything this cluster started carries SLURM_CONF=$conf in its environment (the daemons, the
# job steps, the jobs): cleanup ends exactly those processes, by id.
ours() {
  local p
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" || ${p#/proc/} == "$BASHPID" ]] && continue
    { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf" && echo "${p#/proc/}"
  done
  return 0
}
pid_of() { [[ -s $1 ]] && cat "$1"; return 0; }
stop_pid() {  # pid: TERM, up to 10 s, then KILL
  local pid=$1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null
  return 0
}
cleanup() {
  local rc=$? p
  set +e
  trap - EXIT INT TERM
  if [[ -s $tmp/slurmctld.pid ]]; then
    scancel --quiet --user root >/dev/null 2>&1
    for _ in $(seq 20); do [[ -z $(squeue -h 2>/dev/null) ]] && break; sleep 0.5; done
  fi
  stop_pid "$(pid_of "$tmp/slurmd.pid")"
  stop_pid "$(pid_of "$tmp/slurmctld.pid")"
  for p in $(ours); do kill -KILL "$p" 2>/dev/null; done
  stop_pid "$munged_pid"
  if ((rc != 0 && rc != SKIP)); then
    for f in "$tmp"/slurmctld.log "$tmp"/slurmd.log "$tmp"/munged.log "$tmp"/run/*.log; do
      [[ -f $f ]] && { echo "--- last lines of $f"; tail -n 15 "$f"; }
    done
  fi
  if [[ ${QEVAL_SLURM_KEEP:-0} == 1 ]]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
  echo "slurm test: exit $rc after $((SECONDS - test_start)) s"
  exit "$rc"
}
munged_pid=""
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() {  # seconds, what, command...: runs command every 0.5 s until it succeeds
  local until=$((SECONDS + $1)) what=$2
  shift 2
  ((until > deadline)) && until=$deadline
  while ! "$@" >/dev/null 2>&1; do
    ((SECONDS < until)) || return 1
    sleep 0.5
  done
}

# munge: its own key, socket, pid, log and seed files in the folder.
mkdir -m 0700 "$tmp/munge"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
chmod 0400 "$tmp/munge/munge.key"
socket="$tmp/munge/munge.socket"
munged --force --key-file="$tmp/munge/munge.key" --socket="$socket" --pid-file="$tmp/munge/munged.pid" \
  --log-file="$tmp/munged.log" --seed-file="$tmp/munge/munged.seed" ||
  skip "munged did not start: $(tail -n 3 "$tmp/munged.log" 2>/dev/null)"
wait_for 10 munged test -s "$tmp/munge/munged.pid" || skip "munged wrote no pid file"
munged_pid=$(cat "$tmp/munge/munged.pid")
munge --socket="$socket" -n | unmunge --socket="$socket" >/dev/null || skip "munge cannot encode and decode a credential"

# slurm.conf: this machine as its only node, with the CPUs and memory slurmd detects.
host=$(hostname -s)
node=$(slurmd -C 2>/dev/null | head -n 1) || true
[[ $node == NodeName=* ]] || skip "slurmd -C did not describe this machine: $node"
node="NodeName=$host NodeAddr=127.0.0.1 ${node#NodeName=* }"
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/run"
cat >"$conf" <<EOF
ClusterName=qeval-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
MinJobAge=600
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
$node State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -c >"$tmp/slurmctld.out" 2>&1 || skip "slurmctld did not start: $(tail -n 3 "$tmp/slurmctld.log" "$tmp/slurmctld.out" 2>/dev/null)"
wait_for 20 slurmctld scontrol ping || skip "slurmctld does not answer: $(tail -n 5 "$tmp/slurmctld.log")"
slurmd -N "$host" >"$tmp/slurmd.out" 2>&1 || skip "slurmd did not start: $(tail -n 3 "$tmp/slurmd.log" "$tmp/slurmd.out" 2>/dev/null)"
node_idle() { [[ $(sinfo -h -N -n "$host" -o %T 2>/dev/null) == idle ]]; }
wait_for 30 "node idle" node_idle ||
  skip "the node did not come up idle ($(sinfo -h -N -o '%T %E' 2>&1)): $(tail -n 5 "$tmp/slurmd.log")"
say "Slurm $(sinfo -V | cut -d' ' -f2) up in $((SECONDS - test_start)) s: $node"
sinfo -N -o '%N %P %T %c %m'

# --- The evaluation: stories260K, the sbatch file's schemes and statistics -----------------------
# 200 windows of 256 tokens: about 20 s of one core for the whole evaluation on this project's
# machine, so a shard runs for seconds after its first state save (room for scancel to land mid-run).
model=models/stories260K/stories260K.bin
data=text/tinystories/validation-head.txt
schemes=$(sed -n 's/^schemes="${QEVAL_SCHEMES:-\(.*\)}"$/\1/p' "$sbatch_file")
[[ -n $schemes ]] || fail "cannot read the default schemes from $sbatch_file"
opts=(--tokenizer models/stories260K/tok512.bin --seq-len 256 --max-windows 200 --checkpoint-seconds 0)
shards=4
export QEVAL="$qeval"
unset QEVAL_SCHEMES QEVAL_SHARDS
cd "$tmp/run"

say "one process (the reference record)"
t=$SECONDS
timeout "$(left)" "$qeval" eval -q --model "$model" --data "$data" --threads 1 --schemes "$schemes" --stats-for all \
  "${opts[@]}" --out "$tmp/one.json" >"$tmp/one.log" 2>&1 || fail "the one-process run failed: $(tail -n 5 "$tmp/one.log")"
say "one process: $((SECONDS - t)) s"

# The parts of a record that are its results (as tests/cli/cli_test.cpp compares them): protocol,
# and per scheme the perplexity, the paired comparison with full precision, the statistics and
# every window's row. Compared as exactly written numbers (shortest round-trip form).
same_results() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
def results(path):
    r = json.load(open(path))
    return r, json.dumps({"protocol": r["protocol"], "window_hashes": r["window_hashes"],
                          "schemes": [{k: s[k] for k in ("name", "perplexity", "vs_full", "statistics", "per_window")}
                                      for s in r["schemes"]]}, sort_keys=True)
(r, a), (_, b) = results(sys.argv[1]), results(sys.argv[2])
print("    %s: %d windows; PPL %s" % (sys.argv[1], len(r["schemes"][0]["per_window"]),
      ", ".join("%s %r" % (s["name"], s["perplexity"]["ppl"]) for s in r["schemes"])))
print("    protocol, window hashes, and per scheme perplexity, vs_full, statistics, per-window rows (%d bytes of JSON): %s"
      % (len(a), "IDENTICAL to %s, bit for bit" % sys.argv[2] if a == b else "DIFFER from " + sys.argv[2]))
sys.exit(0 if a == b else 1)
EOF
}

states() {  # job ids...: one line per job or array task: id, state, exit code, run time, node
  local j
  for j in "$@"; do
    scontrol -o show job "$j" 2>/dev/null | awk '{
      delete f; for (k = 1; k <= NF; k++) { split($k, kv, "="); f[kv[1]] = substr($k, length(kv[1]) + 2) }
      id = ("ArrayTaskId" in f) ? f["ArrayJobId"] "_" f["ArrayTaskId"] : f["JobId"]
      printf "    %-8s %-12s %-10s exit %-5s run %s on %s\n", f["JobId"], id, f["JobState"], f["ExitCode"], f["RunTime"], f["NodeList"] }' | sort -k2,2V
  done
}
queue_empty() { [[ -z $(squeue -h -j "$1" 2>/dev/null) ]]; }
wait_jobs() {  # what, job ids...: until none of them is pending or running; prints squeue while waiting
  local what=$1 ids shown=0
  shift
  ids=$(IFS=,; echo "$*")
  while ! queue_empty "$ids"; do
    ((SECONDS < deadline)) || { squeue -j "$ids"; fail "$what: not done within the test's ${budget} s"; }
    if ((SECONDS - shown >= 10)); then squeue -j "$ids" -o '    %.14i %.9T %.8M %R'; shown=$SECONDS; fi
    sleep 1
  done
}
submit() { sbatch --parsable "$@" | cut -d';' -f1; }
# What the sbatch file's header says to run: the array, then the merge as a dependent job.
# cpus-per-task 1 and 1 GB (the file's defaults ask for 8 CPUs and 32 GB): 2 tasks at a time here.
array_opts=(--cpus-per-task=1 --mem=1G --time=10)

say "run 1: the sbatch file as a job array of $shards shards"
out1="$tmp/run1"
t=$SECONDS
job1=$(submit --array=0-$((shards - 1)) "${array_opts[@]}" "$sbatch_file" "$model" "$data" "$out1" "${opts[@]}")
merge1=$(submit --dependency=afterok:"$job1" --kill-on-invalid-dep=yes --mem=1G --time=5 -J qeval-merge -o merge-%j.log \
  --wrap "\"$qeval\" merge $out1/shard-*.json --out $out1/record.json")
say "array job $job1 (tasks ${job1}_0..${job1}_$((shards - 1))), merge job $merge1"
wait_jobs "run 1" "$job1" "$merge1"
say "run 1 done in $((SECONDS - t)) s; states:"
states "$job1" "$merge1"
for ((i = 0; i < shards; i++)); do [[ -f $out1/shard-$i.json ]] || fail "no record from shard $i"; done
[[ -f $out1/record.json ]] || fail "the merge job wrote no record ($(cat merge-"$merge1".log))"
say "run 1: merged record vs one process"
same_results "$out1/record.json" "$tmp/one.json" || fail "run 1: the merged record differs from the one-process record"

say "run 2: the same array; task 1 is cancelled mid-run and resubmitted"
out2="$tmp/run2"
victim=1
state_file="$out2/shard-$victim.json.state.json"
t=$SECONDS
job2=$(submit --array=0-$((shards - 1)) "${array_opts[@]}" "$sbatch_file" "$model" "$data" "$out2" "${opts[@]}")
say "array job $job2"
wait_for 120 "task ${job2}_$victim saves its state" test -s "$state_file" ||
  fail "task ${job2}_$victim wrote no state file within 120 s"
scancel "${job2}_$victim"
say "scancel ${job2}_$victim: its state file holds $(python3 -c '
import json, sys; s = json.load(open(sys.argv[1]))["state"]; print(s.get("windows", "?"))' "$state_file" 2>/dev/null) windows"
task_gone() { queue_empty "${job2}_$victim"; }
wait_for 30 "the cancelled task ends" task_gone || fail "task ${job2}_$victim still queued 30 s after scancel"
states "${job2}_$victim"
scontrol -o show job "${job2}_$victim" | grep -q 'JobState=CANCELLED' || fail "task ${job2}_$victim was not cancelled"
[[ ! -f $out2/shard-$victim.json ]] || fail "task ${job2}_$victim had finished before scancel (no pre-emption tested)"
[[ -s $state_file ]] || fail "the cancelled task's state file is gone"
resub=$(QEVAL_SHARDS=$shards submit --array="$victim" "${array_opts[@]}" "$sbatch_file" "$model" "$data" "$out2" "${opts[@]}")
merge2=$(submit --dependency=afterany:"$job2",afterok:"$resub" --kill-on-invalid-dep=yes --mem=1G --time=5 -J qeval-merge -o merge-%j.log \
  --wrap "\"$qeval\" merge $out2/shard-*.json --out $out2/record.json")
say "resubmitted task $victim as ${resub}_$victim, merge job $merge2"
wait_jobs "run 2" "$job2" "$resub" "$merge2"
say "run 2 done in $((SECONDS - t)) s; states:"
states "$job2" "$resub" "$merge2"
log="qeval-shard-${resub}_$victim.log"
[[ -f $log ]] || fail "no log $log from the resubmitted task"
resumed=$(grep -m1 'windows already done' "$log") || fail "the resubmitted task did not resume: $(tail -n 5 "$log")"
say "the resubmitted task's log: $resumed"
done_windows=$(sed -n 's/.*: \([0-9]*\) windows already done.*/\1/p' <<<"$resumed")
shard_windows=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["schemes"][0]["per_window"]))' \
  "$out1/shard-$victim.json")
((done_windows > 0 && done_windows < shard_windows)) ||
  fail "it resumed from $done_windows of its $shard_windows windows: not from a run stopped midway"
say "shard $victim: $done_windows of its $shard_windows windows came from the state file, the rest were evaluated after resubmission"
[[ -f $out2/record.json ]] || fail "the merge job wrote no record ($(cat merge-"$merge2".log 2>/dev/null))"
say "run 2: merged record (with the resumed shard) vs one process"
same_results "$out2/record.json" "$tmp/one.json" || fail "run 2: the merged record differs from the one-process record"
say "PASS: 4-shard job array and a cancelled, resubmitted and resumed shard both merge to the one-process record bit for bit"

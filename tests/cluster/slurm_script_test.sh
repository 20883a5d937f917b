#!/usr/bin/env bash
# configs/cluster/slurm-shards.sbatch's checks of its environment and arguments, without Slurm and
# without a build (tests/cluster/slurm_test.sh, ctest `slurm`, runs this first, whatever Slurm does).
#
# Runs the file with bash as a Slurm task runs it (the #SBATCH lines are comments), each case in a
# clean environment of its own (env -i: PATH, HOME, the case's variables) with QEVAL set to a stub:
# the stub notes its arguments and, like qeval eval, writes a record to the last --out given, with
# the shard of the last --shard i/n (none for n = 1). The cases:
#   - the ordinary task runs qeval with --shard i/n, --out OUTDIR/shard-i.json, --threads from
#     SLURM_CPUS_PER_TASK, and the options after OUTDIR;
#   - a command substitution in QEVAL_SHARDS, SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_ID or
#     SLURM_CPUS_PER_TASK is never run (its marker file is not created) and is refused;
#   - leading zeros (010: octal 8 for bash, 10 for qeval), signs, spaces, words, 0 shards, a task
#     outside the array and unset variables are refused with one line naming the variable, what was
#     expected and what was found (never bash's "unbound variable");
#   - each option the file sets itself, given again after OUTDIR in any spelling (--out X,
#     --out=X, -o X, -oX, -qo X) or as a --config key, is refused, and qeval does not run;
#   - a finished record of another layout in OUTDIR is neither overwritten nor joined (a
#     resubmitted task without QEVAL_SHARDS, shard i/n over shard i/m, shards over a whole-data
#     record), and the file is left as it was; the same layout runs again.
# A refused case must exit non-zero with exactly one line on stderr and without running the stub.
# Prints one line per case; exits 1 when any fails.
#
# Usage: slurm_script_test.sh [SBATCH_FILE]   (default: configs/cluster/slurm-shards.sbatch)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
sbatch_file="$(realpath "${1:-$root/configs/cluster/slurm-shards.sbatch}")"
[[ -f $sbatch_file ]] || { echo "FAIL: no sbatch file at $sbatch_file" >&2; exit 1; }
command -v python3 >/dev/null || { echo "FAIL: python3 is needed (the sbatch file reads records with it)" >&2; exit 1; }
tmp="$(mktemp -d /tmp/qeval-slurm-script.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

stub="$tmp/qeval"
cat >"$stub" <<'EOF'
#!/usr/bin/env bash
# qeval stub: its arguments one per line in $STUB_LOG; a record to the last --out, with the shard
# of the last --shard i/n when n > 1 (qeval eval takes the last of a repeated option).
printf '%s\n' "$@" >"$STUB_LOG"
out="" shard=""
while (($#)); do
  case $1 in
    --out | -o) out=${2-}; shift ;;
    --out=*) out=${1#--out=} ;;
    --shard) shard=${2-}; shift ;;
    --shard=*) shard=${1#--shard=} ;;
  esac
  shift
done
[[ -n $out ]] || exit 0
if [[ -n $shard && ${shard#*/} != 1 ]]; then
  printf '{"schemes": [], "shard": {"index": %s, "count": %s}}\n' "${shard%/*}" "${shard#*/}" >"$out"
else
  printf '{"schemes": []}\n' >"$out"
fi
EOF
chmod +x "$stub"

passed=0 failed=0
ok() { echo "ok   $case_name"; passed=$((passed + 1)); }
bad() { echo "FAIL $case_name: $*"; failed=$((failed + 1)); }

# new_case NAME: a folder for the case; OUTDIR is $out, the stub's argument log $log.
new_case() {
  case_name=$1
  dir="$tmp/case$((passed + failed))"
  mkdir -p "$dir"
  out="$dir/out" log="$dir/stub.args"
}
# run VAR=VALUE... -- [OPTIONS after OUTDIR...]: the sbatch file on MODEL DATA $out; sets rc, err
# (its stderr) and ran (1 when the stub ran).
run() {
  local vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  set +e
  (cd "$dir" && env -i PATH="$PATH" HOME="${HOME:-/}" QEVAL="$stub" STUB_LOG="$log" "${vars[@]}" \
    bash "$sbatch_file" model.bin data.txt "$out" "$@") >"$dir/stdout" 2>"$dir/stderr"
  rc=$?
  set -e
  err=$(cat "$dir/stderr")
  ran=0
  [[ -f $log ]] && ran=1
  return 0
}
# refused TEXT...: exit non-zero, the stub not run, one line on stderr holding every TEXT.
refused() {
  local text
  ((rc != 0)) || { bad "exit 0, expected a refusal"; return; }
  ((ran == 0)) || { bad "qeval ran with $(paste -sd' ' "$log"); stderr: $err"; return; }
  [[ $err != *"unbound variable"* ]] || { bad "bash's own message: $err"; return; }
  [[ $(wc -l <"$dir/stderr") -eq 1 ]] || { bad "expected one line on stderr, got: $err"; return; }
  for text in "$@"; do
    [[ $err == *"$text"* ]] || { bad "the message does not say \"$text\": $err"; return; }
  done
  ok
}
# ran_with ARG...: exit 0, and the stub's arguments hold each ARG as a whole line, in this order.
ran_with() {
  local want="" a
  ((rc == 0 && ran == 1)) || { bad "exit $rc, qeval ran: $ran; stderr: $err"; return; }
  for a in "$@"; do want+="$a"$'\n'; done
  python3 - "$log" "$want" <<'EOF' || { bad "expected arguments $* in order, got: $(paste -sd' ' "$log")"; return; }
import sys
got = open(sys.argv[1]).read().splitlines()
want = sys.argv[2].splitlines()
pos = 0
for w in want:
    if w not in got[pos:]:
        sys.exit(1)
    pos = got.index(w, pos) + 1
EOF
  ok
}
# record FILE INDEX COUNT: a record as qeval writes it (COUNT 1: a whole-data record).
record() {
  mkdir -p "$(dirname "$1")"
  if (($3 > 1)); then
    printf '{"schemes": [{"name": "full"}], "shard": {"index": %d, "count": %d}}\n' "$2" "$3" >"$1"
  else
    printf '{"schemes": [{"name": "full"}]}\n' >"$1"
  fi
}
# unchanged FILE COPY: a refused case left the file as it was.
unchanged() { cmp -s "$1" "$2" || bad "$1 was changed"; }

echo "== $sbatch_file, run by bash with a stub qeval"

# --- What a task runs --------------------------------------------------------------------------
new_case "a task of an array runs shard i/n into OUTDIR/shard-i.json with its CPUs as threads"
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=2 SLURM_CPUS_PER_TASK=3 SLURM_ARRAY_JOB_ID=77 -- --seq-len 256 -t tok.bin
ran_with --model model.bin --data data.txt --threads 3 --shard 2/4 --resume --out "$out/shard-2.json" --seq-len 256 -t tok.bin
new_case "a resubmitted task takes its shard count from QEVAL_SHARDS"
run QEVAL_SHARDS=8 SLURM_ARRAY_TASK_COUNT=1 SLURM_ARRAY_TASK_ID=3 --
ran_with --threads 1 --shard 3/8 --out "$out/shard-3.json"
new_case "options that only look like the file's own pass through (-t VALUE, -b, --json-field=--out, -1)"
run SLURM_ARRAY_TASK_COUNT=2 SLURM_ARRAY_TASK_ID=0 -- -tmodel.bin -b 2 --json-field=--out --max-windows -1
ran_with --shard 0/2 -tmodel.bin -b 2 --json-field=--out --max-windows -1
new_case "a --config file without the file's own options passes through"
echo '{"seq-len": 256, "max-windows": 8}' >"$dir/ok.json"
run SLURM_ARRAY_TASK_COUNT=2 SLURM_ARRAY_TASK_ID=1 -- --config "$dir/ok.json"
ran_with --shard 1/2 --config "$dir/ok.json"

# --- A command in a number is never run ----------------------------------------------------------
for var in QEVAL_SHARDS SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_ID SLURM_CPUS_PER_TASK; do
  # shellcheck disable=SC2016 # the payloads are text for the sbatch file; nothing here may expand them
  for payload in 'i[$(touch MARKER)]' 'PATH[$(touch MARKER)]' '1+x[$(touch MARKER)]'; do
    new_case "$var='$payload' is not run"
    marker="$dir/marker"
    value=${payload//MARKER/$marker}
    vars=(SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=1 "$var=$value")
    run "${vars[@]}" --
    if [[ -e $marker ]]; then bad "the command in $var ran (it created $marker)"; else refused "$var" "decimal integer" "$value"; fi
  done
done

# --- Numbers that are not plain decimals in range ------------------------------------------------
new_case "QEVAL_SHARDS=010 (octal 8 for bash, 10 for qeval) is refused"
run QEVAL_SHARDS=010 SLURM_ARRAY_TASK_COUNT=1 SLURM_ARRAY_TASK_ID=3 --
refused QEVAL_SHARDS "no leading zero" '"010"'
new_case "SLURM_ARRAY_TASK_ID=08 is refused"
run SLURM_ARRAY_TASK_COUNT=10 SLURM_ARRAY_TASK_ID=08 --
refused SLURM_ARRAY_TASK_ID '"08"'
new_case "SLURM_ARRAY_TASK_COUNT=04 is refused"
run SLURM_ARRAY_TASK_COUNT=04 SLURM_ARRAY_TASK_ID=1 --
refused SLURM_ARRAY_TASK_COUNT '"04"'
new_case "SLURM_CPUS_PER_TASK=08 is refused"
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=1 SLURM_CPUS_PER_TASK=08 --
refused SLURM_CPUS_PER_TASK '"08"'
for value in abc 4x ' 4' '4 ' -1 +4 1e3 0x10 9999999999 0; do
  new_case "QEVAL_SHARDS='$value' is refused"
  run QEVAL_SHARDS="$value" SLURM_ARRAY_TASK_COUNT=1 SLURM_ARRAY_TASK_ID=0 --
  refused QEVAL_SHARDS "expected a decimal integer in [1," "\"$value\""
done
new_case "a non-numeric SLURM_ARRAY_TASK_COUNT says so (not 'unbound variable')"
run SLURM_ARRAY_TASK_COUNT=abc SLURM_ARRAY_TASK_ID=0 --
refused SLURM_ARRAY_TASK_COUNT "expected a decimal integer" '"abc"'
new_case "an empty SLURM_ARRAY_TASK_COUNT is refused"
run SLURM_ARRAY_TASK_COUNT= SLURM_ARRAY_TASK_ID=0 --
refused SLURM_ARRAY_TASK_COUNT '""'
new_case "a non-numeric SLURM_ARRAY_TASK_ID says so"
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=two --
refused SLURM_ARRAY_TASK_ID '"two"'
new_case "SLURM_CPUS_PER_TASK=0 is refused"
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=0 SLURM_CPUS_PER_TASK=0 --
refused SLURM_CPUS_PER_TASK '"0"'
new_case "a task outside the array's size is refused"
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=4 --
refused SLURM_ARRAY_TASK_ID "[0, 3]" "found 4"
new_case "no array at all is refused with what to do"
run --
refused SLURM_ARRAY_TASK_COUNT QEVAL_SHARDS "--array"
new_case "no task id is refused"
run QEVAL_SHARDS=4 --
refused SLURM_ARRAY_TASK_ID "--array"
new_case "a value with a newline stays on one line"
run QEVAL_SHARDS=$'4\n5' SLURM_ARRAY_TASK_ID=0 --
refused QEVAL_SHARDS "\$'4\\n5'"

# --- Options the file sets itself ----------------------------------------------------------------
for given in "--shard 1/2" "--shard=1/2" "--out x.json" "--out=x.json" "-o x.json" "-ox.json" "-qo x.json" \
  "--schemes full" "--schemes=full" "-s full" "-sfull" "-qs full" "--model m.bin" "--model=m.bin" "-m m.bin" \
  "--data d.txt" "--data=d.txt" "-d d.txt" "--threads 2" "--threads=2" "--stats-for none" "--stats-for=none" \
  "--resume" "--state-file s.json" "--state-file=s.json"; do
  read -ra words <<<"$given"
  new_case "option $given after OUTDIR is refused"
  run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=1 -- --seq-len 64 "${words[@]}"
  case $given in
    --*) refused "option \"${words[0]}\"" "sets ${words[0]%%=*} itself" ;;
    *) refused "option \"${words[0]}\"" "itself" ;;
  esac
done
echo '{"seq-len": 256, "out": "elsewhere.json"}' >"$tmp/config-out.json"
echo '{"schemes": "full", "shard": "0/1"}' >"$tmp/config-schemes.json"
new_case "a --config file setting out is refused"
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=1 -- --config "$tmp/config-out.json"
refused "config-out.json" "sets out, which this file sets itself"
new_case "a --config= file setting schemes and shard is refused"
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=1 -- "--config=$tmp/config-schemes.json"
refused "config-schemes.json" "sets schemes, shard"
new_case "MODEL DATA OUTDIR must come before the options"
(
  cd "$dir" && env -i PATH="$PATH" QEVAL="$stub" STUB_LOG="$log" SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=0 \
    bash "$sbatch_file" --seq-len 256 model.bin data.txt "$out"
) >/dev/null 2>"$dir/stderr" && rc=0 || rc=$?
err=$(cat "$dir/stderr") ran=0
[[ -f $log ]] && ran=1
refused "MODEL DATA OUTDIR come first" "--seq-len"

# --- Finished records of another layout ------------------------------------------------------------
new_case "a task resubmitted without QEVAL_SHARDS does not overwrite finished shard 0/4"
for k in 0 1 2 3; do record "$out/shard-$k.json" "$k" 4; done
cp "$out/shard-0.json" "$dir/before.json"
run SLURM_ARRAY_TASK_COUNT=1 SLURM_ARRAY_TASK_ID=0 --
refused "$out/shard-0.json holds shard 0/4" "whole-data record" "QEVAL_SHARDS=4"
unchanged "$out/shard-0.json" "$dir/before.json"
new_case "shard 1/4 does not overwrite finished shard 1/8"
record "$out/shard-1.json" 1 8
cp "$out/shard-1.json" "$dir/before.json"
run QEVAL_SHARDS=4 SLURM_ARRAY_TASK_ID=1 --
refused "$out/shard-1.json holds shard 1/8" "shard 1/4" "QEVAL_SHARDS=8"
unchanged "$out/shard-1.json" "$dir/before.json"
new_case "shard 0/4 does not overwrite a finished whole-data record"
record "$out/shard-0.json" 0 1
cp "$out/shard-0.json" "$dir/before.json"
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=0 --
refused "$out/shard-0.json holds a whole-data record" "shard 0/4"
unchanged "$out/shard-0.json" "$dir/before.json"
new_case "a whole-data run is not written beside finished shards of 4 (its own not yet written)"
for k in 1 2 3; do record "$out/shard-$k.json" "$k" 4; done
run SLURM_ARRAY_TASK_COUNT=1 SLURM_ARRAY_TASK_ID=0 --
refused "$out/shard-1.json holds shard 1/4" "beside it" "QEVAL_SHARDS=4"
[[ ! -e $out/shard-0.json ]] || bad "$out/shard-0.json was written"
new_case "a file that is no record is not overwritten"
mkdir -p "$out" && echo 'not json' >"$out/shard-2.json"
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=2 --
refused "$out/shard-2.json holds no record"
new_case "the same layout runs again (finished shards 0/4 and 2/4, task 2 of 4)"
record "$out/shard-0.json" 0 4
record "$out/shard-2.json" 2 4
run SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=2 --
ran_with --shard 2/4 --out "$out/shard-2.json"
new_case "a whole-data run replaces its own whole-data record"
record "$out/shard-0.json" 0 1
run SLURM_ARRAY_TASK_COUNT=1 SLURM_ARRAY_TASK_ID=0 --
ran_with --shard 0/1 --out "$out/shard-0.json"

echo "== $passed passed, $failed failed"
((failed == 0))

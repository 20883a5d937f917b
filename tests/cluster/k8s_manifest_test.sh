#!/usr/bin/env bash
# ctest `k8s_manifest`: configs/cluster/k8s-indexed-job.yaml checked as Kubernetes' API server
# would check its schema, without a cluster.
#
#   1. kubernetes-validate (PyPI, pinned below; installed into a virtual environment in VENV when
#      missing) validates the file against the OpenAPI schema of Kubernetes $K8S_VERSION in strict
#      mode: every field's name, type and nesting, required fields, no unknown fields. A copy with
#      one unknown field must be rejected (the validator really is strict).
#   2. The shard arithmetic the schema cannot see: completionMode Indexed, completions and
#      parallelism equal to the N of `--shard ${JOB_COMPLETION_INDEX}/N`, --resume, and records
#      and state files written to the mounted results volume.
# Not tested (no cluster here): admission and defaulting by a real API server (enum values such as
# completionMode are not in the schema), scheduling, the image, the volumes' claims, a pod
# restarted after pre-emption; tests/cluster/slurm_test.sh runs the same qeval commands (shards,
# --resume, merge) under Slurm. Exits 77 (skipped) when the validator cannot be installed.
# Usage: k8s_manifest_test.sh VENV
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 VENV" >&2; exit 2; }
venv="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
manifest="$root/configs/cluster/k8s-indexed-job.yaml"
validator_version=1.37.0
K8S_VERSION=1.37.0
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

kv="$venv/bin/kubernetes-validate"
if ! "$kv" --version 2>/dev/null | grep -qF "$validator_version"; then
  command -v python3 >/dev/null || skip "no python3 to install kubernetes-validate"
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian keeps venv in its own package.
    if ((EUID == 0)) && command -v apt-get >/dev/null; then
      DEBIAN_FRONTEND=noninteractive timeout 300 apt-get -qq update >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive timeout 300 apt-get -qq install -y python3-venv >/dev/null 2>&1 || true
    fi
    rm -rf "$venv"
    python3 -m venv "$venv" >/dev/null 2>&1 || skip "python3 cannot make a virtual environment (python3-venv)"
  fi
  timeout 300 "$venv/bin/python" -m pip install -q "kubernetes-validate==$validator_version" >&2 ||
    skip "pip could not install kubernetes-validate==$validator_version"
fi
echo "== kubernetes-validate $("$kv" --version 2>&1 | head -n 1), Kubernetes $K8S_VERSION schema, strict"
"$kv" --strict -k "$K8S_VERSION" "$manifest" || fail "$manifest does not validate"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
sed 's/^\(      restartPolicy: OnFailure\)$/\1\n      restartPolicyy: Never/' "$manifest" >"$tmp/unknown-field.yaml"
cmp -s "$manifest" "$tmp/unknown-field.yaml" && fail "could not make the unknown-field copy (restartPolicy line moved?)"
if "$kv" --strict -k "$K8S_VERSION" "$tmp/unknown-field.yaml" >"$tmp/out" 2>&1; then
  cat "$tmp/out"
  fail "the validator accepted an unknown field: it is not checking strictly"
fi
echo "== a copy with an unknown field is rejected: $(grep -o "'restartPolicyy' was unexpected" "$tmp/out")"

"$venv/bin/python" - "$manifest" <<'EOF'
import re, sys, yaml
job = yaml.safe_load(open(sys.argv[1]))
spec = job["spec"]
pod = spec["template"]["spec"]
(c,) = pod["containers"]
command = " ".join(c["command"] + c["args"])
problems = []
m = re.search(r"--shard \$\{JOB_COMPLETION_INDEX\}/(\d+)", command)
if spec.get("completionMode") != "Indexed":
    problems.append("completionMode is not Indexed (JOB_COMPLETION_INDEX is set only for Indexed Jobs)")
if not m:
    problems.append("the command has no --shard ${JOB_COMPLETION_INDEX}/N")
else:
    n = int(m.group(1))
    for key in ("completions", "parallelism"):
        if spec.get(key) != n:
            problems.append(f"{key} is {spec.get(key)}, the command makes {n} shards")
if "--resume" not in command:
    problems.append("no --resume: a restarted pod would start from zero")
mounts = {v["mountPath"]: v for v in c["volumeMounts"]}
out = re.search(r"--out (\S+)/shard-\$\{JOB_COMPLETION_INDEX\}\.json", command)
if not out or out.group(1) not in mounts or mounts[out.group(1)].get("readOnly"):
    problems.append("records (and their state files) are not written to a writable mounted volume")
for p in problems:
    print("FAIL:", p)
if problems:
    sys.exit(1)
print(f"== Indexed Job of {n} completions, {spec['parallelism']} in parallel; each pod runs shard "
      f"${{JOB_COMPLETION_INDEX}}/{n} with --resume, writing to the volume at {out.group(1)}")
EOF
echo "PASS: $manifest"

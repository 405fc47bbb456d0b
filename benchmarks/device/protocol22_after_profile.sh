#!/usr/bin/env bash
# Protocol 22's steps here, once profile_references.sh has run on an H200 (benchmarks/results/
# search_cpu_2026-12-05_validation-protocol-22.txt says what they are and why; docs/search.md, "The reference's
# profile as features"). Usage, from the repository root, with the folder the device call's files came back to:
#   bash benchmarks/device/protocol22_after_profile.sh FILES_AT [--jobs 2]
#   bash benchmarks/device/protocol22_after_profile.sh --list   (prints R22's twelve runs, one per line, and stops)
# 1. stores the counters in the bundled records and the second recording (reference_profiles.py store);
# 2. repeats X18's 3validation-families run with model seed 0 and compares it, seed for seed, with the committed
#    file; a difference stops here (the protocol then reruns X18 on all nine before the rule is read);
# 3. runs R22's twelve runs (10-15 minutes on two cores), logs beside each JSON;
# 4. reads the rule: select_settings.py --protocol 22.
# It stops at the first step that fails, saying which; steps already done are skipped on a second call (a result
# file that exists is not run again), so a cut-short call can be repeated.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: $0 FILES_AT [--jobs N] | --list" >&2; exit 2; }
results=benchmarks/results
common=(--lopo-searched-only --skip-baselines)
nine=(--exclude depthwise_conv2d,maxpool2d)
r22_runs() {  # R22's twelve runs: the result file, then search_bench's arguments
  local m spec f
  for m in 0 1; do
    for spec in "3validation-families:column_sum,gelu,layernorm" "3new-families:dot,bincount,spmv_ell" \
                "2heldout-families:nbody,stencil3d"; do
      echo "$results/search_cpu_2026-12-04_${spec%%:*}_R22_model-seed$m.json --families ${spec#*:} ${nine[*]} --model-seed $m ${common[*]} --reference-profile"
    done
    echo "$results/search_cpu_2026-12-04_hgemm_mma-variants-target_R22_model-seed$m.json --families hgemm_mma --ignore-vendor hgemm_mma ${nine[*]} --model-seed $m ${common[*]} --reference-profile"
    for f in depthwise_conv2d maxpool2d; do
      echo "$results/search_cpu_2026-12-05_${f}_heldout_R22_model-seed$m.json --families $f --model-seed $m ${common[*]} --reference-profile"
    done
  done
}
if [ "$1" = "--list" ]; then r22_runs; exit 0; fi
files=$1; shift
jobs=2
if [ "${1:-}" = "--jobs" ]; then jobs=${2:?--jobs needs a number}; fi
for f in reference_profiles_bundled.json reference_profiles_second.json; do
  [ -f "$files/$f" ] || { echo "$files/$f is missing: the device call did not finish that part" >&2; exit 1; }
done
py=.venv/bin/python
[ -x "$py" ] || { echo "no .venv here: run ./kl test --collect-only -q once to build it" >&2; exit 2; }

echo "== 1. storing the references' counters"
$py kernellab/problems/tools/reference_profiles.py store "$files/reference_profiles_bundled.json"
$py kernellab/problems/tools/reference_profiles.py store "$files/reference_profiles_second.json" \
  --recordings $results/recordings/h200_2026-12-03

run() {  # OUT ARGS...: one search_bench run, skipped where OUT exists
  local out=$1; shift
  if [ -f "$out" ]; then echo "   $out exists, skipped"; return 0; fi
  if OMP_NUM_THREADS=1 nice -n 5 $py benchmarks/search_bench.py "$@" --out "$out.part" > "${out%.json}_log.txt" 2>&1; then
    mv "$out.part" "$out"
  else
    echo "   $out failed: ${out%.json}_log.txt says why" >&2; return 1
  fi
}
export -f run; export py

echo "== 2. X18's check run (3validation-families, model seed 0)"
check=/tmp/protocol22_X18_check.json
run $check --families column_sum,gelu,layernorm "${nine[@]}" --model-seed 0 "${common[@]}"
$py - "$check" $results/search_cpu_2026-12-04_3validation-families_X18_model-seed0.json <<'EOF'
import json, sys
new, old = (json.load(open(p))["search"] for p in sys.argv[1:])
bad = {f: (new[f]["puct_surrogate"]["values"], old[f]["puct_surrogate"]["values"]) for f in old
       if new.get(f, {}).get("puct_surrogate", {}).get("values") != old[f]["puct_surrogate"]["values"]}
for f in old:
    print(f"   {f}: {old[f]['puct_surrogate']['values']}" + ("  DIFFERS, now " + str(bad[f][0]) if f in bad else ""))
sys.exit("X18's committed runs do not reproduce: rerun X18 on all nine first (protocol 22)." if bad else 0)
EOF

echo "== 3. R22's twelve runs ($jobs at a time)"
jobsfile=$(mktemp)
r22_runs > "$jobsfile"
xargs -P "$jobs" -L 1 bash -c 'run "$@"' _ < "$jobsfile" || true  # a failed run is named below
rm -f "$jobsfile"
missing=$(r22_runs | while read -r out _; do [ -f "$out" ] || echo "$out"; done)
[ -z "$missing" ] || { echo "runs that failed (their _log.txt says why):"; echo "$missing"; exit 1; } >&2

echo "== 4. the rule"
$py benchmarks/probes/cpu_2026-12-03/select_settings.py --protocol 22

#!/usr/bin/env bash
# Protocol 22's steps here, once profile_references.sh has run on an H200 (benchmarks/results/
# search_cpu_2026-12-05_validation-protocol-22.txt says what they are and why; docs/search.md, "The reference's
# profile as features"), or protocol 26's (--protocol 26), the same with the counters read on an H100 standing in
# for the H200 (STAND_IN=1 profile_references.sh; -protocol-26.txt), or protocol 27's (--protocol 27), protocol 22's
# candidate against R26, the default it chose (-protocol-27.txt), or protocol 28's (--protocol 28, FILES_AT -): R26
# against P28, which reads four of the counters already stored (steps 1 and 2 skipped), or protocol 29's (--protocol 29,
# FILES_AT -): P28 against H29, P28 with Thompson sampling from a run's second measurement (step 1 skipped), or protocol 30's
# (--protocol 30, FILES_AT -): P28 against G30, P28 with a Gaussian process as the run-local model, or protocol 31's (--protocol
# 31, FILES_AT -): P28 against G31, G30 widened for unseen knob values as the forest is, or protocol 32's (--protocol
# 32, FILES_AT -): G31 against S32, G31 whose recorded-data model weighs the trained families by their likeness to the
# searched problem's reference. Usage, from the repository root, with the folder the device call's files came back to:
#   bash benchmarks/device/protocol22_after_profile.sh FILES_AT [--protocol 22|26|27|28|29|30|31|32] [--jobs 2]
#   bash benchmarks/device/protocol22_after_profile.sh --list [--protocol 22|26|27|28|29|30|31|32]   (prints the candidate's
#                                                                                     twelve runs and stops)
# 1. stores the counters in the bundled records and the second recording (reference_profiles.py store, with
#    --stand-in under protocol 26, which marks each reference record with the GPU the counters were read on);
# 2. repeats the default's 3validation-families run with model seed 0 and compares it, seed for seed, with the
#    committed file; a difference stops here (the protocol then reruns the default on all eleven before the rule is
#    read). The default is X18 under protocols 22 and 26, R26 under 27, whose check runs before step 1 (R26
#    reads the H100's counters, which step 1 replaces), P28 under 29-31 and G31 under 32;
# 3. runs the candidate's (R22's, R26's, P28's, H29's, G30's, G31's or S32's) twelve runs (10-20 minutes on two cores),
#    logs beside each JSON;
# 4. reads the rule: select_settings.py --protocol 22 (or 26, 27, 28, 29, 30, 31, 32).
# It stops at the first step that fails, saying which; steps already done are skipped on a second call (a result
# file that exists is not run again), so a cut-short call can be repeated.
set -euo pipefail
cd "$(dirname "$0")/../.."
usage="usage: $0 FILES_AT [--protocol 22|26|27|28|29|30|31|32] [--jobs N] | --list [--protocol 22|26|27|28|29|30|31|32]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
files=$1; shift
protocol=22
jobs=2
while [ $# -gt 0 ]; do
  case $1 in
    --protocol) protocol=${2:?--protocol needs 22, 26, 27, 28, 29, 30, 31 or 32}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
case $protocol in
  22) config=R22; stand_in=(); default=X18; default_flags=() ;;
  26) config=R26; stand_in=(--stand-in); default=X18; default_flags=() ;;
  27) config=R22; stand_in=(); default=R26; default_flags=(--reference-profile) ;;
  28) config=P28; stand_in=(); default=R26; default_flags=(--reference-profile) ;;
  29) config=H29; stand_in=(); default=P28; default_flags=(--reference-profile --reference-counters portable) ;;
  30) config=G30; stand_in=(); default=P28; default_flags=(--reference-profile --reference-counters portable) ;;
  31) config=G31; stand_in=(); default=P28; default_flags=(--reference-profile --reference-counters portable) ;;
  32) config=S32; stand_in=(); default=G31; default_flags=(--reference-profile --reference-counters portable --local-model gp-novelty)
      rerun=G31-rerun ;;  # G31's runs did not reproduce on this machine's CPU: the protocol reruns them all
  *) echo "$usage" >&2; exit 2 ;;
esac
results=benchmarks/results
common=(--lopo-searched-only --skip-baselines)
candidate=(--reference-profile)
[ "$protocol" -lt 28 ] || candidate+=(--reference-counters portable)
[ "$protocol" != 29 ] || candidate+=(--measure-choice thompson)
[ "$protocol" != 30 ] || candidate+=(--local-model gp)
[ "$protocol" != 31 ] || candidate+=(--local-model gp-novelty)
[ "$protocol" != 32 ] || candidate+=(--local-model gp-novelty --family-weights similar --similar-strength 1)
nine=(--exclude depthwise_conv2d,maxpool2d)
rerun=${rerun:-}
r22_runs() {  # the candidate's twelve runs (and the default's rerun, where the protocol has one)
  if [ -n "$rerun" ]; then config=$rerun candidate="${default_flags[*]}" one_config; fi
  one_config
}
one_config() {  # one configuration's twelve runs: the result file, then search_bench's arguments
  local m spec f
  for m in 0 1; do
    for spec in "3validation-families:column_sum,gelu,layernorm" "3new-families:dot,bincount,spmv_ell" \
                "2heldout-families:nbody,stencil3d"; do
      echo "$results/search_cpu_2026-12-04_${spec%%:*}_${config}_model-seed$m.json --families ${spec#*:} ${nine[*]} --model-seed $m ${common[*]} ${candidate[*]}"
    done
    echo "$results/search_cpu_2026-12-04_hgemm_mma-variants-target_${config}_model-seed$m.json --families hgemm_mma --ignore-vendor hgemm_mma ${nine[*]} --model-seed $m ${common[*]} ${candidate[*]}"
    for f in depthwise_conv2d maxpool2d; do
      echo "$results/search_cpu_2026-12-05_${f}_heldout_${config}_model-seed$m.json --families $f --model-seed $m ${common[*]} ${candidate[*]}"
    done
  done
}
if [ "$files" = "--list" ]; then r22_runs; exit 0; fi
if [ "$protocol" -ge 28 ]; then
  [ "$files" = - ] || { echo "protocol $protocol stores no counters: its FILES_AT is -" >&2; exit 2; }
else
for f in reference_profiles_bundled.json reference_profiles_second.json; do
  [ -f "$files/$f" ] || { echo "$files/$f is missing: the device call did not finish that part" >&2; exit 1; }
done
fi
py=.venv/bin/python
[ -x "$py" ] || { echo "no .venv here: run ./kl test --collect-only -q once to build it" >&2; exit 2; }

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

check_default() {
echo "== 2. $default's check run (3validation-families, model seed 0)"
check=/tmp/protocol${protocol}_${default}_check.json
run $check --families column_sum,gelu,layernorm "${nine[@]}" --model-seed 0 "${common[@]}" "${default_flags[@]}"
$py - "$check" $results/search_cpu_2026-12-04_3validation-families_${default}_model-seed0.json "$default" <<'EOF'
import json, sys
new, old = (json.load(open(p))["search"] for p in sys.argv[1:3])
bad = {f: (new[f]["puct_surrogate"]["values"], old[f]["puct_surrogate"]["values"]) for f in old
       if new.get(f, {}).get("puct_surrogate", {}).get("values") != old[f]["puct_surrogate"]["values"]}
for f in old:
    print(f"   {f}: {old[f]['puct_surrogate']['values']}" + ("  DIFFERS, now " + str(bad[f][0]) if f in bad else ""))
sys.exit(f"{sys.argv[3]}'s committed runs do not reproduce: rerun it on all eleven first." if bad else 0)
EOF
}


store_counters() {
echo "== 1. storing the references' counters"
$py kernellab/problems/tools/reference_profiles.py store "$files/reference_profiles_bundled.json" "${stand_in[@]}"
$py kernellab/problems/tools/reference_profiles.py store "$files/reference_profiles_second.json" \
  --recordings $results/recordings/h200_2026-12-03 "${stand_in[@]}"
}

case $protocol in
  27) check_default; store_counters ;;
  28) ;;  # the records R26's check run reproduced at protocol 27's start; nothing to store
  29|30|31) check_default ;;  # nothing to store; P28's runs must reproduce under the code that adds H29 (G30, G31)
  32) ;;  # G31's check failed on this machine (an AMD EPYC; its runs were made on an Intel Xeon): it is rerun whole
  *) store_counters; check_default ;;
esac

also=""
[ -z "$rerun" ] || also=" and $default's, rerun as $rerun,"
echo "== 3. $config's twelve runs$also ($jobs at a time)"
jobsfile=$(mktemp)
r22_runs > "$jobsfile"
xargs -P "$jobs" -L 1 bash -c 'run "$@"' _ < "$jobsfile" || true  # a failed run is named below
rm -f "$jobsfile"
missing=$(r22_runs | while read -r out _; do [ -f "$out" ] || echo "$out"; done)
[ -z "$missing" ] || { echo "runs that failed (their _log.txt says why):"; echo "$missing"; exit 1; } >&2

echo "== 4. the rule"
$py benchmarks/probes/cpu_2026-12-03/select_settings.py --protocol "$protocol"

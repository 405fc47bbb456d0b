#!/usr/bin/env bash
# One device call (kind nvidia-h200), carrying the wheels ($WHEELS, default .whl; .device-wheels holds the
# pycuda wheel and its dependencies) and, optionally, .cubins (compile_variants.py output; without them
# check_families.py compiles through NVRTC) and .kb-data/site (tree-sitter for gpu_runner):
#   1. check_families.py on $PROBLEMS (every variant on every size case against float64; CHECK_LIMIT=N
#      checks the reference and the first N variants only, where gpu_runner.record's own validation
#      against the reference on every size case is to cover the rest),
#   2. gpu_runner.record for each problem that passed, resuming from its records if they exist.
# Everything lands under $OUT; RECORD_S caps the seconds spent recording each problem.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${WHEELS:-.whl}"/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/.kb-data/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
day=$(date -u +%F)
PROBLEMS=${PROBLEMS:?set PROBLEMS=a,b}
nvidia-smi -L | tee "$OUT/nvidia-smi.txt"
if [ "${CHECK:-1}" = 1 ]; then
  echo "== check"; SECONDS=0
  cubins=(); [ -d .cubins ] && cubins=(--cubins .cubins)
  limit=(); [ -n "${CHECK_LIMIT:-}" ] && limit=(--limit "$CHECK_LIMIT")
  timeout "${CHECK_S:-200}" python3 kernellab/problems/tools/check_families.py --out "$OUT/check" "${cubins[@]}" "${limit[@]}" \
    --problems "$PROBLEMS" --nvrtc-sample 4 2>&1 | tee "$OUT/check_log_$day.txt"
  echo "check took $SECONDS s"
fi
for p in ${PROBLEMS//,/ }; do
  if [ "${CHECK:-1}" = 1 ]; then
    ok=$(python3 -c "import json,sys; s=json.load(open('$OUT/check/summary_$p.json')); print(int(not s['failed'] and not any(r.get('error') for r in s['reference'])))" 2>/dev/null || echo 0)
    [ "$ok" = 1 ] || { echo "$p: the check failed, not recording"; continue; }
  fi
  echo "== record $p"; SECONDS=0
  [ -f "kernellab/problems/$p/records/h200.jsonl.gz" ] && cp "kernellab/problems/$p/records/h200.jsonl.gz" "$OUT/${p}_h200.jsonl.gz"
  timeout "${RECORD_S:-280}" python3 -m gpu_runner.record "kernellab/problems/$p" --out "$OUT/${p}_h200.jsonl.gz" \
    --profile-sample "${PROFILE_SAMPLE:-50}" ${DEADLINE_S:+--deadline-s "$DEADLINE_S"} 2>&1 | tail -8 | tee "$OUT/${p}_record_log_$day.txt"
  echo "$p record took $SECONDS s"
done

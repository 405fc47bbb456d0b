#!/usr/bin/env bash
# One device call (kind nvidia-h200, carry .device-wheels and .kb-data/site: tree-sitter for gpu_runner): checks the tf32x3 variants of sgemm (index 852 on)
# against float64 on every size case, times the fastest beside cuBLAS, then records them (resuming the records).
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .device-wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD/.kb-data/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L | tee $OUT/nvidia-smi.txt
mkdir -p $OUT/check
SECONDS=0
if [ "${CHECK:-1}" = 1 ]; then
start=852
while :; do
  timeout 400 python3 kernellab/problems/tools/check_families.py --worker sgemm --start $start --out $OUT/check --top 8 --runs 20 --quick-runs 3 --hang-s 60
  rc=$?
  st=$(cat $OUT/check/progress_sgemm 2>/dev/null || echo 0)
  echo "worker rc=$rc progress=$st after $SECONDS s"
  [ "$st" = done ] && break
  [ $rc = 3 ] || break
  start=$((st + 1))
done
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
s = json.load(open(f"{out}/check/summary_sgemm.json"))
print("failed:", len(s["failed"]), [ (f["variant"], (f.get("error") or "")[:120]) for f in s["failed"][:5]])
v = s.get("vendor", {}).get("ms")
print("reference ms", s["reference_ms"], "cuBLAS ms", v)
for t in s["top"]:
    print(t["variant"], t["knobs"], "ms %.4f" % t["ms"], "TFLOP/s %.1f" % (s["flops"] / t["ms"] / 1e9), "of cuBLAS %.3f" % (v / t["ms"]))
PY
echo "check took $SECONDS s"
fi
if [ "${RECORD:-1}" = 1 ]; then
  SECONDS=0
  cp kernellab/problems/sgemm/records/h200.jsonl.gz $OUT/sgemm_h200.jsonl.gz
  timeout 330 python3 -m gpu_runner.record kernellab/problems/sgemm --out $OUT/sgemm_h200.jsonl.gz --profile-sample 8 2>&1 | tail -5
  echo "record took $SECONDS s"
fi

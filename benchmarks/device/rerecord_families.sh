#!/usr/bin/env bash
# One device call (kind nvidia-h200; carry .device-wheels and .kb-data/site): records bundled families
# again, from scratch, with the same protocol as their committed records (gpu_runner.record, seed 0), into
# $OUT/<family>_h200_rerecord.jsonl.gz. Nothing under kernellab/ is changed: the second recording is there
# to measure how far one recording's speedups, and the set of variants at a family's target, move from
# one recording to the next (benchmarks/probes/cpu_2026-12-03/recording_noise.py reads them).
#   FAMILIES=gemv,reduce_sum RECORD_S=150 bash benchmarks/device/rerecord_families.sh
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .device-wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD/.kb-data/site:$PWD PYTHONUNBUFFERED=1
FAMILIES=${FAMILIES:?set FAMILIES=a,b}
nvidia-smi -L | tee "$OUT/nvidia-smi.txt"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$OUT/nvidia-smi.txt"
for f in ${FAMILIES//,/ }; do
  echo "== record $f"; SECONDS=0
  timeout "${RECORD_S:-150}" python3 -m gpu_runner.record "kernellab/problems/$f" --out "$OUT/${f}_h200_rerecord.jsonl.gz" \
    --profile-sample 0 2>&1 | tail -4
  echo "$f record took $SECONDS s"
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$OUT/nvidia-smi.txt"

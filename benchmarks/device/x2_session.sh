#!/usr/bin/env bash
# One device call on a 2-GPU H200 host (kind nvidia-h200-x2), carrying .whl (see docs/scaleout.md):
#   1. the runner's GPU tests, 2. scale-out over 1 and 2 GPUs (and 2 workers per GPU),
#   3. with RECORD_SGEMM=1, the sgemm variants the first recording missed (done 2026-11-29). Everything lands under $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
day=$(date -u +%F)
nvidia-smi -L | tee "$OUT/nvidia-smi.txt"
echo "== GPU tests"; SECONDS=0
timeout 200 python3 -m pytest -m gpu tests/gpu_runner -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT/runner_h200_pytest_gpu_$day.txt"
echo "GPU tests took $SECONDS s"
echo "== scale-out"; SECONDS=0
timeout 330 python3 benchmarks/scaleout_bench.py --backend cupy --problems reduce_sum,transpose,softmax \
  --per-problem 16 --min-speedup 0.5 --workers 1,2,4 --gpus 2 --no-profile --fs-poll-s 0.05 \
  --deadline-s 320 --label h200x2 --out "$OUT/scaleout_h200x2_$day.json" \
  --log-archive "$OUT/scaleout_h200x2_logs_$day.tar.gz" 2>&1 | tee "$OUT/scaleout_h200x2_log_$day.txt"
echo "scale-out took $SECONDS s"
[ "${RECORD_SGEMM:-0}" = 1 ] || exit 0
echo "== sgemm variants not yet recorded"; SECONDS=0
cp kernellab/problems/sgemm/records/h200.jsonl.gz "$OUT/sgemm_h200.jsonl.gz"
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m gpu_runner.record kernellab/problems/sgemm --out "$OUT/sgemm_h200.jsonl.gz" \
  2>&1 | tail -5 | tee "$OUT/sgemm_record_log_$day.txt"
echo "sgemm record took $SECONDS s"

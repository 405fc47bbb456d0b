#!/usr/bin/env bash
# One device call (kind nvidia-h200; 32 references, one ncu start each, capped at 450 s): Nsight Compute counters of every recording's reference.
# Carry .device-wheels (the pycuda wheel and its dependencies) and .kb-data (tree-sitter and tree-sitter-cuda
# for gpu_runner: .kb-data/site, or packed as .kb-data/site.tar.xz with `tar -C .kb-data -cJf .kb-data/site.tar.xz
# site` when the unpacked libraries do not fit beside the tracked tree under the call's 64 MiB). Then, here:
#   python kernellab/problems/tools/reference_profiles.py store reference_profiles_bundled.json
#   python kernellab/problems/tools/reference_profiles.py store reference_profiles_second.json \
#       --recordings benchmarks/results/recordings/h200_2026-12-03
# which writes the counters into the reference records (bundled, and the second recording of the eight).
# STAND_IN=1 reads the counters on whatever GPU the call got (an H100 standing in for the H200, protocol 26:
# benchmarks/results/search_cpu_2026-12-05_validation-protocol-26.txt); the JSONs name that GPU, and `store` then
# needs --stand-in, which marks each reference record with it.
set -u
stand_in=()
[ "${STAND_IN:-0}" = 1 ] && stand_in=(--stand-in)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .device-wheels/*.whl \
  || exit 1
site=$PWD/.kb-data/site
if [ ! -d "$site" ]; then mkdir -p /tmp/kb && tar -C /tmp/kb -xJf .kb-data/site.tar.xz && site=/tmp/kb/site || exit 1; fi
export PYTHONPATH=/tmp/site:$site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/nvidia-smi.txt"
SECONDS=0
timeout 300 python3 kernellab/problems/tools/reference_profiles.py profile "${stand_in[@]}" --out "$OUT/reference_profiles_bundled.json" \
  2>&1 | tee "$OUT/profile_references_log.txt"
timeout 150 python3 kernellab/problems/tools/reference_profiles.py profile "${stand_in[@]}" \
  --recordings benchmarks/results/recordings/h200_2026-12-03 --out "$OUT/reference_profiles_second.json" \
  2>&1 | tee -a "$OUT/profile_references_log.txt"
echo "took $SECONDS s" | tee -a "$OUT/profile_references_log.txt"

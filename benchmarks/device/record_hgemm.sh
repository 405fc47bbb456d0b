#!/usr/bin/env bash
# One device call (kind nvidia-h200): record the CuTe hgemm family beside cuBLAS at 4096^3.
#
# Before it, here (no GPU; about 30-90 s of one core per variant):
#   python kernellab/problems/tools/carry_compiles.py pack hgemm .cubins/hgemm_compiles.tar.gz
# and the CUTLASS headers in .cutlass/cutlass_library/source/include (the nvidia-cutlass wheel's).
# Carry: .device-wheels .kb-data/site .cutlass .cubins
#
#   bash benchmarks/device/record_hgemm.sh [--deadline-s S]      (default 170)
#
# EXTRA=FOLDER (a problem folder, e.g. a trial version of the family carried under .cubins/, its
# compiles packed as .cubins/<name>_compiles.tar.gz) is recorded after the family, in the last 40 s.
#
# 1. the carried compiles go into the compile cache (taken only from the same nvcc and CUTLASS),
# 2. gpu_runner.record measures the reference, cuBLAS and two variants; if neither is correct the
#    family is not measured further (a broken kernel costs seconds, not the call),
# 3. the rest of the family, starting no variant past the deadline (a later call resumes the file).
# Everything lands under $OUT: hgemm_h200.jsonl.gz and the log; the last lines are a short table.
set -u
deadline=170
[ "${1:-}" = "--deadline-s" ] && deadline=$2
SECONDS=0
python3 -m pip install -q --no-index --no-deps --target /tmp/site .device-wheels/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.kb-data/site:$PWD/.cutlass:$PWD PYTHONUNBUFFERED=1
log=$OUT/hgemm_record_log_$(date -u +%F).txt
records=$OUT/hgemm_h200.jsonl.gz
[ -f kernellab/problems/hgemm/records/h200.jsonl.gz ] && cp kernellab/problems/hgemm/records/h200.jsonl.gz "$records"
{
  nvidia-smi -L
  nvcc --version | tail -1
  python3 -c "from gpu_runner.cutlass_headers import cutlass_version; print('CUTLASS headers', cutlass_version())"
  for archive in .cubins/*_compiles.tar.gz; do python3 kernellab/problems/tools/carry_compiles.py unpack "$archive"; done
  echo "== first variants ($SECONDS s)"
  timeout 120 python3 -m gpu_runner.record kernellab/problems/hgemm --out "$records" --limit 2 --timeout 30 2>&1 | tail -4
  if python3 - "$records" <<'EOF'
import gzip, json, sys
rows = [json.loads(l) for l in gzip.open(sys.argv[1], "rt")]
variants = [r for r in rows if r.get("knobs")]
for r in rows:
    print(r["variant"], r["status"], (r.get("reason") or "")[:300])
sys.exit(0 if any(r["status"] == "ok" for r in variants) else 1)
EOF
  then
    reserve=0; [ -n "${EXTRA:-}" ] && reserve=40
    left=$((deadline - SECONDS - 25 - reserve))
    echo "== the family, $left s ($SECONDS s)"
    timeout $((left + 20)) python3 -m gpu_runner.record kernellab/problems/hgemm --out "$records" --timeout 30 \
      --profile-sample 2 --deadline-s "$left" 2>&1 | tail -6
  else
    echo "no variant of the first two is correct: the family is not recorded"
  fi
  if [ -n "${EXTRA:-}" ]; then
    echo "== $EXTRA ($SECONDS s)"
    timeout 60 python3 -m gpu_runner.record "$EXTRA" --out "$OUT/$(basename "$EXTRA")_h200.jsonl.gz" --timeout 30 \
      --no-vendor --deadline-s 30 2>&1 | tail -3
  fi
  echo "== table ($SECONDS s)"
  python3 - "$records" ${EXTRA:+"$OUT/$(basename "${EXTRA:-x}")_h200.jsonl.gz"} <<'EOF'
import gzip, json, os, sys
rows = [{**json.loads(l), "file": os.path.basename(p)} for p in sys.argv[1:] if os.path.exists(p)
        for l in gzip.open(p, "rt")]
flops = 2 * 4096 ** 3
vendor = next((r for r in rows if r["variant"].startswith("vendor") and r["status"] == "ok"), None)
ok = sorted((r for r in rows if r.get("knobs") and r["status"] == "ok"), key=lambda r: r["candidate"]["median_ms"])
failed = [r for r in rows if r.get("knobs") and r["status"] != "ok"]
tf = lambda r: flops / (r["candidate"]["median_ms"] * 1e-3) / 1e12
if vendor:
    print(f"cuBLAS {vendor['candidate']['median_ms']:.4f} ms {tf(vendor):.0f} TFLOP/s")
for r in ok[:8]:
    ratio = vendor["candidate"]["median_ms"] / r["candidate"]["median_ms"] if vendor else float("nan")
    print(f"{r['file'][:12]:12s} {r['variant']:52s} {r['candidate']['median_ms']:.4f} ms {tf(r):4.0f} TFLOP/s {ratio:.3f} of cuBLAS")
print(f"{len(ok)} correct, {len(failed)} not: " + ", ".join(sorted({r['status'] for r in failed})))
for r in failed[:3]:
    print(r["variant"], r["status"], (r.get("reason") or "")[:300])
EOF
  echo "done in $SECONDS s"
} 2>&1 | tee "$log"

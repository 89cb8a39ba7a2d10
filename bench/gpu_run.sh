#!/usr/bin/env bash
# One lent GPU's whole check, in one call of the device tool (a lease is short: 15
# device-minutes a session, machine start included).  Run from the repository root:
#
#     bash bench/gpu_run.sh COMMIT [BUDGET_S]
#
# Order (most valuable first, each step bounded so the budget is kept): the versions,
# gpu_eval.py --part pairwise, the kernel tests compiled for real
# (pytest -m "kernels or gpu", 8 workers, at most 200 s, 150 s a test: the fuzz tests of
# both lowerings compile a kernel per drawn shape), gpu_variants.py (the CCSD(T)
# kernel in each lowering and tile config, at most 100 s), then --part rest, gemm and
# compare with what is left (all --quick; PARTS="..." to choose, PAIRWISE_S=... the pairwise
# part's deadline, default 130 s, which left out 2 of its 17 rows on an H100; compare's SASS check
# reads the most recent kernels in the Triton cache, so it runs while those are the
# suite's).
# Everything lands in $W and is packed into $OUT/gpu.tgz after every step (the tool
# brings back at most 8 files, so one archive), and the gates of each part are
# printed last.  Nothing is installed: PYTHONPATH points at the checkout.
set -u
COMMIT=${1:-unknown}
BUDGET=${2:-540}
T0=$SECONDS
W=${W:-/tmp/einc-gpu}
OUT=${OUT:-$W/out}
mkdir -p "$W" "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.tcache \
       EINC_CACHE_DIR=$PWD/.ecache TRITON_CACHE_AUTOTUNING=1
left() { echo $((BUDGET - (SECONDS - T0))); }
pack() {   # (measure mode's timings per candidate, decisions.json, travel too)
  cp -f "$EINC_CACHE_DIR/decisions.json" "$W/" 2>/dev/null
  tar czf "$OUT/gpu.tgz" -C "$W" --exclude=out . 2>/dev/null
}
step() { echo "== $1 at $((SECONDS - T0)) s, $(left) s left =="; }

{
  echo "commit $COMMIT"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import sys, torch, triton, opt_einsum; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'opt_einsum', opt_einsum.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
  python3 -c "import einc; print('einc imports from', einc.__file__)"
} 2>&1 | tee "$W/env.txt"

part() {   # part NAME SECONDS
  local d=$1 s=$2
  (( $(left) < s + 20 )) && s=$(( $(left) - 20 ))
  if (( s < 30 )); then echo "skip part $d: $(left) s left"; return; fi
  step "gpu_eval --part $d (deadline $s s)"
  timeout $((s + 15)) python3 bench/gpu_eval.py --part "$d" --quick --out "$W" \
      --deadline "$s" --row-timeout 60 >"$W/$d.log" 2>&1
  echo "exit $?" >>"$W/$d.log"
  pack
}

tests() {    # the kernel tests compiled for real: at most 200 s
  local s=$(( $(left) - 20 )); (( s > 200 )) && s=200
  if (( s < 40 )); then echo "skip tests: $(left) s left"; return; fi
  step "pytest -m 'kernels or gpu' (limit $s s)"
  timeout "$s" python3 -m pytest -m "kernels or gpu" -n 8 -q -p no:cacheprovider -p no:benchmark \
      --timeout 150 -rfE --junitxml="$W/pytest.xml" >"$W/pytest.log" 2>&1
  echo "exit $?" >>"$W/pytest.log"
  pack
}

variants() {   # every lowering and tile config of the CCSD(T) kernel: at most 100 s
  local s=$(( $(left) - 20 )); (( s > 100 )) && s=100
  if (( s < 40 )); then echo "skip variants: $(left) s left"; return; fi
  step "gpu_variants.py (deadline $((s - 15)) s)"
  timeout "$s" python3 bench/gpu_variants.py --out "$W" --deadline $((s - 15)) >"$W/variants.log" 2>&1
  echo "exit $?" >>"$W/variants.log"
  pack
}

# PARTS reorders or narrows them. The default puts first what the open issue needs: the
# pairwise family (measure mode's first round and plain-kernel candidate; plain has not
# run on an H200), then the kernel tests at the new head, then the CCSD(T) kernel's
# variants, then rest, gemm and compare with what is left.
for p in ${PARTS:-pairwise tests variants rest gemm compare}; do
  case $p in
    pairwise) part pairwise ${PAIRWISE_S:-130} ;;
    tests) tests ;;
    variants) variants ;;
    rest) part rest 80 ;;
    gemm) part gemm 100 ;;
    compare) part compare 90 ;;
    *) echo "unknown part $p" ;;
  esac
done



step "summary"
for d in gemm pairwise rest compare; do
  [ -f "$W/$d.log" ] || continue
  echo "---- $d"
  sed -n '/^== gates ==/,$p' "$W/$d.log" | grep -v '^$' | cut -c1-400
  grep -m3 -i "traceback\|error:" "$W/$d.log" | cut -c1-300
done
if [ -f "$W/pytest.log" ]; then echo "---- pytest"; tail -n 25 "$W/pytest.log" | cut -c1-300; fi
if [ -f "$W/variants.log" ]; then echo "---- variants"; grep -v "^ *$" "$W/variants.log" | head -n 30 | cut -c1-200; fi
pack
ls -la "$OUT"

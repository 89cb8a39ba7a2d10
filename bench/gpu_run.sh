#!/usr/bin/env bash
# One lent GPU's whole check, in one call of the device tool, under 8 minutes on a cold
# machine (a lease is 15 device-minutes, machine start included).  Run from the
# repository root, as checked out (nothing is installed: PYTHONPATH points at the
# checkout; torch, triton and opt_einsum come with the GPU image):
#
#     bash bench/gpu_run.sh COMMIT [BUDGET_S]          # default 420 s
#     bash bench/gpu_run.sh --dry-run                  # on a CPU: each Python part's smoke test
#
# Parts, in order (PARTS="first gemm" chooses and orders them; each has its own deadline
# and is skipped where too little of the budget is left):
#   first   bench/gpu_first.py --part first, with empty Triton and einc caches: the
#           default's (learn mode's) first call per new key against torch's path,
#           calls 2-20, the background thread's compile time, the steady state in
#           interleaved rounds against forced kernels, cuBLAS and torch.einsum, the
#           pairwise family's rows among them (170 s)
#   rest    gpu_eval.py --part rest --quick: host time per step (GATE 3) (75 s)
#   gemm    gpu_eval.py --part gemm --quick: forced kernels (e_kern) against the same plan
#           on cuBLAS (einc_blas) (70 s)
#   train   bench/gpu_first.py --part train: forward + backward against torch.einsum (50 s)
#   tma     bench/gpu_tma.py: the TMA variant of plain bf16/fp16 GEMMs (4096^2 x 4096 and
#           more) and of a permuted step of that size against cuBLAS (after torch.einsum's
#           copies) and the module's own kernel, two configs each (55 s)
# then, on what is left of the budget (the five above can take all of it; bench/gpu.md says
# what they left on a GPU): pairwise (gpu_eval, 130 s) and peers (bench/gpu_first.py --part
# peers: CuPy's einsum and jax.jit(jnp.einsum) where they import, 35 s); and, only where
# PARTS names them: compare (gpu_eval), tests (pytest -m "kernels or gpu"), variants
# (gpu_variants.py; VARIANTS=REGEX picks its rows, the CCSD(T) terms by default), models (bench/models.py --device cuda --quick: the torch.compile
# backend "einc" against inductor and eager, 150 s), compile (bench/first_launch.py
# --rounds 1: no GPU, the machine's CPUs: first launches' compiles one at a time against
# side by side, 90 s; then --jobs 2 --time-ms 65: the first launches as learn mode's
# background jobs on one thread against two, 60 s; then --caller: the caller's thread,
# on a CPU of its own, while those first launches compile on the others, 60 s), verdict (the gemm and pairwise families three times, interleaved,
# gpu_eval --verdict: einc, torch.einsum and torch.einsum + .contiguous() only; each run
# with an einc cache of its own, so learn mode decides afresh, Triton's cache shared;
# then gpu_eval --runs: the geomeans per run and over the rows' medians; 50 + 100 s a run,
# so PARTS=verdict alone on a lease: bash bench/gpu_run.sh COMMIT 480), capture
# (bench/gpu_capture.py: CUDA graphs captured in the default global mode while learn
# mode's jobs compile, einc as checked out against the code before it, 110 s), stranded
# (bench/gpu_stranded.py: a stranded column index in T against the gather, over K from
# 32 to 2048, float32 and bfloat16: the K bound of that move, 120 s).
#
# Everything lands in one folder named as bench/measured/ names a run's folder,
# <device>-<date> (a README.md stub with the device, driver, versions and commit, the
# CSVs and logs), packed into $OUT/gpu.tgz after every part (the tool brings back at most
# 8 files); unpack it into bench/measured/ and write the narrative in the stub.
set -u
if [ "${1:-}" = "--dry-run" ]; then     # a CPU machine: does everything start and write its CSV?
  set -e
  bash -n "$0"
  export PYTHONPATH=$PWD EINC_CACHE_DIR=${TMPDIR:-/tmp}/einc-gpu-dry/ecache
  for p in first train peers; do
    timeout 300 python3 bench/gpu_first.py --part "$p" --dry-run --deadline 60 --out "${TMPDIR:-/tmp}/einc-gpu-dry"
  done
  python3 bench/gpu_eval.py --list --part rest >/dev/null
  timeout 300 python3 bench/gpu_tma.py --dry-run --out "${TMPDIR:-/tmp}/einc-gpu-dry"
  timeout 300 python3 bench/gpu_capture.py --dry-run --deadline 60 --out "${TMPDIR:-/tmp}/einc-gpu-dry" >/dev/null
  timeout 300 python3 bench/gpu_stranded.py --dry-run --out "${TMPDIR:-/tmp}/einc-gpu-dry" >/dev/null
  echo "dry run: ok"
  exit 0
fi
COMMIT=${1:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
BUDGET=${2:-420}
T0=$SECONDS
ROOT=${W:-/tmp/einc-gpu}
OUT=${OUT:-$ROOT/out}
SLUG=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 | tr 'A-Z' 'a-z' \
       | sed 's/nvidia //; s/[^a-z0-9]\+/-/g; s/-$//')
NAME=${SLUG:-gpu}-$(date -u +%Y-%m-%d)
W=$ROOT/$NAME
mkdir -p "$W" "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$ROOT/tcache EINC_CACHE_DIR=$ROOT/ecache \
       TRITON_CACHE_AUTOTUNING=1
left() { echo $((BUDGET - (SECONDS - T0))); }
pack() {   # (learn and measure modes' timings per candidate, decisions.json, travel too)
  cp -f "$EINC_CACHE_DIR/decisions.json" "$W/" 2>/dev/null
  tar czf "$OUT/gpu.tgz" -C "$ROOT" "$NAME" 2>/dev/null
}
step() { echo "== $1 at $((SECONDS - T0)) s, $(left) s left =="; echo "- $1: started at $((SECONDS - T0)) s" >>"$W/parts.txt"; }
budget() {   # budget WANTED: the seconds a part may take now (0: skip it)
  local s=$1
  (( $(left) < s + 15 )) && s=$(( $(left) - 15 ))
  (( s < 25 )) && s=0
  echo "$s"
}

{
  echo "commit $COMMIT"
  date -u +"date %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  python3 -c "import sys, torch, triton, opt_einsum; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'opt_einsum', opt_einsum.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
  python3 -c "import einc; print('einc', einc.__version__, 'imports from', einc.__file__)"
  for m in cupy jax; do python3 -c "import $m; print('$m', $m.__version__)" 2>/dev/null || echo "$m: not installed"; done
} 2>&1 | tee "$W/env.txt"
{
  echo "# $NAME: einc on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1) at $COMMIT"
  echo
  echo "Measured by \`bash bench/gpu_run.sh $COMMIT $BUDGET\` (bench/gpu.md), PARTS=\"${PARTS:-first rest gemm train tma pairwise peers}\"."
  echo "Narrative: to be written (what the figures say, against the targets of the open issue)."
  echo
  echo '```text'
  cat "$W/env.txt"
  echo '```'
  echo
  echo "Files: gpu_first_first.csv (first calls, steady state), gpu_eval_rest.csv, gpu_eval_gemm.csv,"
  echo "gpu_first_train.csv, gpu_tma.csv, the logs, parts.txt (when each part started), decisions.json."
} >"$W/README.md"
pack

first_part() {   # first 170: cold caches of its own
  local s; s=$(budget 170); (( s == 0 )) && { echo "skip first: $(left) s left"; return; }
  step "gpu_first --part first (deadline $s s, cold caches)"
  rm -rf "$ROOT/cold"
  TRITON_CACHE_DIR=$ROOT/cold/tcache EINC_CACHE_DIR=$ROOT/cold/ecache TRITON_CACHE_AUTOTUNING=0 \
    timeout $((s + 10)) python3 bench/gpu_first.py --part first --out "$W" --deadline "$s" >"$W/first.log" 2>&1
  echo "exit $?" >>"$W/first.log"
  cp -f "$ROOT/cold/ecache/decisions.json" "$W/decisions_first.json" 2>/dev/null
  pack
}

gpu_first() {   # gpu_first PART SECONDS
  local s; s=$(budget "$2"); (( s == 0 )) && { echo "skip $1: $(left) s left"; return; }
  step "gpu_first --part $1 (deadline $s s)"
  timeout $((s + 10)) python3 bench/gpu_first.py --part "$1" --out "$W" --deadline "$s" >"$W/$1.log" 2>&1
  echo "exit $?" >>"$W/$1.log"
  pack
}

part() {   # part NAME SECONDS: a gpu_eval part
  local s; s=$(budget "$2"); (( s == 0 )) && { echo "skip part $1: $(left) s left"; return; }
  step "gpu_eval --part $1 (deadline $s s)"
  timeout $((s + 15)) python3 bench/gpu_eval.py --part "$1" --quick --out "$W" \
      --deadline "$s" --row-timeout 60 >"$W/$1.log" 2>&1
  echo "exit $?" >>"$W/$1.log"
  pack
}

tests() {    # the kernel tests compiled for real
  local s; s=$(budget 200); (( s == 0 )) && { echo "skip tests: $(left) s left"; return; }
  step "pytest -m 'kernels or gpu' (limit $s s)"
  timeout "$s" python3 -m pytest -m "kernels or gpu" -n 8 -q -p no:cacheprovider -p no:benchmark \
      --timeout 150 -rfE --junitxml="$W/pytest.xml" >"$W/pytest.log" 2>&1
  echo "exit $?" >>"$W/pytest.log"
  pack
}

tma_part() {   # the TMA variant against cuBLAS and the module's kernel on plain GEMMs
  local s; s=$(budget 55); (( s == 0 )) && { echo "skip tma: $(left) s left"; return; }
  step "gpu_tma.py (deadline $((s - 20)) s)"
  timeout "$s" python3 bench/gpu_tma.py --out "$W" --deadline $((s - 20)) >"$W/tma.log" 2>&1
  echo "exit $?" >>"$W/tma.log"
  pack
}

models_part() {   # torch.compile(backend="einc") against inductor and eager, forward
  local s; s=$(budget 150); (( s == 0 )) && { echo "skip models: $(left) s left"; return; }
  step "models.py --device cuda (limit $s s)"
  timeout "$s" python3 bench/models.py --device cuda --quick --out "$W" >"$W/models.log" 2>&1
  echo "exit $?" >>"$W/models.log"
  pack
}

compile_part() {   # first launches' compiles, one thread against side by side (the CPUs only)
  local s; s=$(budget 90); (( s == 0 )) && { echo "skip compile: $(left) s left"; return; }
  step "first_launch.py --rounds 1 (limit $s s)"
  timeout "$s" python3 bench/first_launch.py --rounds 1 >"$W/first_launch.md" 2>"$W/first_launch.log"
  echo "exit $?" >>"$W/first_launch.log"
  pack
  s=$(budget 60); (( s == 0 )) && { echo "skip compile --jobs: $(left) s left"; return; }
  step "first_launch.py --jobs 2 --time-ms 65 --rounds 1 (limit $s s)"
  timeout "$s" python3 bench/first_launch.py --jobs 2 --time-ms 65 --rounds 1 >"$W/first_launch_jobs.md" \
    2>"$W/first_launch_jobs.log"
  echo "exit $?" >>"$W/first_launch_jobs.log"
  pack
  s=$(budget 60); (( s == 0 )) && { echo "skip compile --caller: $(left) s left"; return; }
  step "first_launch.py --caller --rounds 1 (limit $s s)"
  timeout "$s" python3 bench/first_launch.py --caller --rounds 1 >"$W/first_launch_caller.md" \
    2>"$W/first_launch_caller.log"
  echo "exit $?" >>"$W/first_launch_caller.log"
  pack
}

verdict_part() {   # gemm and pairwise, three interleaved runs of the default against torch.einsum
  local r fam want s
  for r in 1 2 3; do
    for fam in gemm pairwise; do
      want=50; [ "$fam" = pairwise ] && want=100
      s=$(budget "$want"); (( s == 0 )) && { echo "skip verdict run $r $fam: $(left) s left"; continue; }
      step "gpu_eval --part $fam --verdict, run $r (deadline $s s)"
      mkdir -p "$W/verdict$r"
      EINC_CACHE_DIR=$ROOT/verdict$r/ecache timeout $((s + 15)) python3 bench/gpu_eval.py --part "$fam" --quick \
          --verdict --no-roofline --out "$W/verdict$r" --deadline "$s" --row-timeout 60 >"$W/verdict$r/$fam.log" 2>&1
      echo "exit $?" >>"$W/verdict$r/$fam.log"
      pack
    done
  done
  python3 bench/gpu_eval.py --runs "$W"/verdict1 "$W"/verdict2 "$W"/verdict3 >"$W/verdict.md" 2>&1
  pack
}

capture_part() {   # CUDA graphs captured while learn mode's jobs run: as checked out, and without exempt
  local s; s=$(budget 110); (( s == 0 )) && { echo "skip capture: $(left) s left"; return; }
  step "gpu_capture.py (deadline $((s - 10)) s)"
  timeout "$s" python3 bench/gpu_capture.py --out "$W" --deadline $((s - 10)) >"$W/capture.log" 2>&1
  echo "exit $?" >>"$W/capture.log"
  pack
}

stranded_part() {   # the T move against the gather over K: where lower.STRANDED_K belongs
  local s; s=$(budget 120); (( s == 0 )) && { echo "skip stranded: $(left) s left"; return; }
  step "gpu_stranded.py (deadline $((s - 20)) s)"
  timeout "$s" python3 bench/gpu_stranded.py --out "$W" --deadline $((s - 20)) >"$W/stranded.log" 2>&1
  echo "exit $?" >>"$W/stranded.log"
  pack
}

variants() {   # every lowering and tile config of the CCSD(T) kernel (VARIANTS=REGEX: other rows)
  local s; s=$(budget 100); (( s == 0 )) && { echo "skip variants: $(left) s left"; return; }
  step "gpu_variants.py ${VARIANTS:-} (deadline $((s - 15)) s)"
  timeout "$s" python3 bench/gpu_variants.py ${VARIANTS:+--filter "$VARIANTS"} --out "$W" --deadline $((s - 15)) \
      >"$W/variants.log" 2>&1
  echo "exit $?" >>"$W/variants.log"
  pack
}

for p in ${PARTS:-first rest gemm train tma pairwise peers}; do
  case $p in
    first) first_part ;;
    rest) part rest 75 ;;
    gemm) part gemm 70 ;;
    train) gpu_first train 50 ;;
    peers) gpu_first peers 35 ;;
    tma) tma_part ;;
    pairwise) part pairwise 130 ;;
    compare) part compare 90 ;;
    tests) tests ;;
    variants) variants ;;
    models) models_part ;;
    compile) compile_part ;;
    verdict) verdict_part ;;
    capture) capture_part ;;
    stranded) stranded_part ;;
    *) echo "unknown part $p" ;;
  esac
done

step "summary"
for d in first train peers tma; do
  [ -f "$W/$d.log" ] || continue
  echo "---- $d"; grep -v "^ *$" "$W/$d.log" | tail -n 20 | cut -c1-300
done
for d in rest gemm pairwise compare; do
  [ -f "$W/$d.log" ] || continue
  echo "---- $d"
  sed -n '/^== gates ==/,$p' "$W/$d.log" | grep -v '^$' | cut -c1-400
  grep -m3 -i "traceback\|error:" "$W/$d.log" | cut -c1-300
done
if [ -f "$W/pytest.log" ]; then echo "---- pytest"; tail -n 25 "$W/pytest.log" | cut -c1-300; fi
if [ -f "$W/gpu_capture.csv" ]; then echo "---- capture"; cat "$W/gpu_capture.csv"; grep -m3 -i "traceback\|error" "$W/capture.log" | cut -c1-300; fi
if [ -f "$W/gpu_stranded.csv" ]; then echo "---- stranded"; cat "$W/gpu_stranded.csv" | cut -c1-300; fi
if [ -f "$W/verdict.md" ]; then echo "---- verdict"; cat "$W/verdict.md" | cut -c1-300; fi
if [ -f "$W/first_launch.md" ]; then echo "---- compile"; tail -n 10 "$W/first_launch.md" | cut -c1-300; fi
if [ -f "$W/first_launch_jobs.md" ]; then tail -n 8 "$W/first_launch_jobs.md" | cut -c1-300; fi
if [ -f "$W/models.log" ]; then echo "---- models"; grep -v "^ *$" "$W/models.md" 2>/dev/null | tail -n 8 | cut -c1-300; tail -n 3 "$W/models.log"; fi
echo "total $((SECONDS - T0)) s of $BUDGET" | tee -a "$W/parts.txt"
pack
ls -la "$OUT"

#!/usr/bin/env bash
# The GPU half of issue 5's validation matrix, run ON a CUDA machine (the
# device tool's H100/H200) from the repository root:
#
#   scripts/gpu-matrix.sh OUTDIR
#
# 1. builds pipegrid against the machine's CUDA LibTorch (PyTorch's, found
#    through torch.utils.cmake_prefix_path) without SimGrid, with the Debian
#    header packages from .gpu-deps/ (made here by scripts/gpu-deps.sh and
#    carried along), into build-gpu/ (kept when already there);
# 2. for each model and partition count, calibrates on the device that runs
#    the plans (`calibrate --device cuda-partitioned:N`: per-layer times on one
#    SM partition, copies between partitions, overheads), writing a profile
#    and a platform;
# 3. runs every plan of the matrix (schedules x models x partition counts x
#    M) REPEATS times with `execute`, writing the measured timelines;
# 4. packs everything into OUTDIR/gpu-matrix.tar.gz (the device tool returns
#    at most 8 files) next to the logs.
#
# On a machine with SimGrid, scripts/gpu-report.sh then simulates each plan
# with the calibrated files and compares (docs/validation.md, "GPU matrix").
# Environment: REPEATS (default 3), BUDGET_S (seconds after which no new plan
# starts, default 420), PLANS (a grep -E filter on plan names, default all),
# MODELS (default "mlp gpt"). A dry run of the whole workflow on a
# CPU machine: DEVICE=cpu SIZES=small PIPEGRID=build/pipegrid (no build;
# cpu:N instead of cuda-partitioned:N; tiny models).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-matrix.sh OUTDIR}
mkdir -p "$out"
work=$(mktemp -d /tmp/gpu-matrix.XXXXXX)
repeats=${REPEATS:-3}
budget=${BUDGET_S:-420}
filter=${PLANS:-.}
models=${MODELS:-"mlp gpt"}
device=${DEVICE:-cuda-partitioned}
sizes=${SIZES:-gpu}
start=$(date +%s)
log="$out/gpu-matrix.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }

# --- build ---------------------------------------------------------------
if [ -n "${PIPEGRID:-}" ]; then
  pipegrid=$PIPEGRID
else
prefix=/tmp/pipegrid-deps
mkdir -p "$prefix"
for deb in .gpu-deps/*.deb; do
  # OpenSSL only where the machine has none of its own.
  case "$deb" in */libssl*) [ -f /usr/include/openssl/sha.h ] && continue ;; esac
  dpkg -x "$deb" "$prefix"
done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# pipegrid hands execute and calibrate to pipegrid-torch next to it: both are needed.
[ -f .gpu-build/build-gpu.tar.gz ] && [ ! -x build-gpu/pipegrid-torch ] && tar -xzf .gpu-build/build-gpu.tar.gz
if [ ! -x build-gpu/pipegrid ] || [ ! -x build-gpu/pipegrid-torch ]; then
  # LibTorch's CMake otherwise probes the GPU's architecture by compiling a
  # program with nvcc (pipegrid compiles no CUDA code); H100 and H200 are 9.0.
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  say "configure: torch at $torch_prefix"
  if ! cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPIPEGRID_WITH_SIMGRID=OFF -DPIPEGRID_BUILD_TESTS=OFF -DPIPEGRID_BUILD_BENCH=OFF \
      -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" >"$out/configure.log" 2>&1; then
    say "configure failed: see configure.log"; tail -30 "$out/configure.log"; exit 1
  fi
  if ! cmake --build build-gpu -j"$(nproc)" --target pipegrid pipegrid-copy-probe >"$out/build.log" 2>&1; then
    say "build failed: see build.log"; grep -E "error" "$out/build.log" | head -30; exit 1
  fi
fi
pipegrid=build-gpu/pipegrid
say "built in $(( $(date +%s) - start )) s"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' >>"$log" 2>&1 || true
fi

# --- smoke ---------------------------------------------------------------
# A few seconds on tiny models before minutes of calibration: the whole
# device (cuda) and two SM partitions (cuda-partitioned:2), one plan each.
# When neither runs, the matrix would only repeat the same error: stop.
mkdir -p "$work/matrix"
smoke_ok=0
for smoke in "${device%-partitioned}" "$device:2"; do
  if $pipegrid execute --model mlp $(scripts/gpu-model-options.sh small mlp) --schedule gpipe \
      --stages "$([ "$smoke" = "${device%-partitioned}" ] && echo 1 || echo 2)" --micro-batches 2 --device "$smoke" \
      --mini-batches 2 --warmup 1 --json >"$work/matrix/smoke-${smoke/:/-}.json" 2>"$work/matrix/smoke-${smoke/:/-}.err"; then
    say "smoke on $smoke: ok"; smoke_ok=1
  else
    say "smoke on $smoke failed:"; tail -5 "$work/matrix/smoke-${smoke/:/-}.err" | tee -a "$log"
  fi
done

# --- transfer rule -------------------------------------------------------
# How concurrent copies leaving one GPU share their path (simulate
# --transfer-rule; docs/validation.md, "Transfer rule").
if [ -x build-gpu/validate/pipegrid-copy-probe ]; then
  if build-gpu/validate/pipegrid-copy-probe --megabytes 4,16,64 --repeats 7 >"$out/copy-probe.json" 2>"$out/copy-probe.err"; then
    say "copy probe: $(python3 -c "import json; print('; '.join('%s %d MB: %.2f/%.2f %s' % (r['pattern'], r['megabytes'], r['ratio_first'], r['ratio_last'], r['nearest_rule']) for r in json.load(open('$out/copy-probe.json'))['results']))")"
  else
    say "copy probe failed:"; tail -5 "$out/copy-probe.err" | tee -a "$log"
  fi
fi
[ "$smoke_ok" = 1 ] || { say "no device kind ran the smoke plan: matrix not run"; exit 1; }

# --- the matrix ----------------------------------------------------------
# Model sizes: large enough that one action takes a millisecond or more on
# a quarter of an H100, small enough for 24 plans x REPEATS in minutes.
model_options() { scripts/gpu-model-options.sh "$sizes" "$1"; }
mkdir -p "$work/matrix"
: >"$work/matrix/plans.txt"
for model in $models; do
  for n in 2 4; do
    calibrated="$work/matrix/$model-p$n"
    if ! $pipegrid calibrate --model "$model" $(model_options "$model") --device "$device:$n" \
        --output-profile "$calibrated.json" --output-platform "$calibrated.xml" >"$calibrated.calibrate.txt" 2>&1; then
      say "calibrate $model on cuda-partitioned:$n failed:"; tail -5 "$calibrated.calibrate.txt" | tee -a "$log"; continue
    fi
    for schedule in gpipe 1f1b-sno 1f1b-so interleaved-1f1b zb-h1 pipedream; do
      # Interleaved: two stages per device (--stages counts them all).
      # PipeDream: one micro-batch per mini-batch, compared in the steady
      # state over more mini-batches.
      stages=$n; ms="4 8"; minis=5; warm=2
      [ "$schedule" = interleaved-1f1b ] && stages=$((2 * n))
      [ "$schedule" = pipedream ] && { ms=1; minis=16; warm=4; }
      for m in $ms; do
        plan="$model-p$n-$schedule-m$m"
        echo "$plan" | grep -qE "$filter" || continue
        if [ $(( $(date +%s) - start )) -gt "$budget" ]; then say "budget of $budget s spent: $plan and later not run"; continue; fi
        ok=1
        for r in $(seq 1 "$repeats"); do
          if ! $pipegrid execute --model "$model" $(model_options "$model") --schedule "$schedule" --stages "$stages" \
              --micro-batches "$m" --device "$device:$n" --mini-batches "$minis" --warmup "$warm" \
              --csv "$work/matrix/$plan-r$r.csv" --json >"$work/matrix/$plan-r$r.json" 2>"$work/matrix/$plan-r$r.err"; then
            say "$plan run $r failed:"; tail -3 "$work/matrix/$plan-r$r.err" | tee -a "$log"; ok=0; break
          fi
        done
        [ $ok = 1 ] && echo "$plan $model $n $schedule $m $repeats $stages $minis $warm" >>"$work/matrix/plans.txt"
        say "$plan: $(python3 -c "import json,sys; print(' '.join('%.3f ms' % (1e3*json.load(open(f))['measured_minibatch_time_s']) for f in sys.argv[1:]))" "$work"/matrix/"$plan"-r*.json 2>/dev/null)"
      done
    done
  done
done
# One stage on the whole GPU (cuda): the baseline without partitions.
for model in $models; do
  $pipegrid execute --model "$model" $(model_options "$model") --schedule gpipe --stages 1 --micro-batches 4 \
    --device "${device%-partitioned}" --mini-batches 5 --warmup 2 --json >"$work/matrix/$model-whole-device.json" 2>&1 ||
    say "$model on one whole device failed"
done
echo "$device $sizes" >"$work/matrix/device.txt"
tar -C "$work" -czf "$out/gpu-matrix.tar.gz" matrix
# The binaries, for a later call on a fresh machine (carried back as
# .gpu-build/build-gpu.tar.gz, unpacked before the build step).
[ -z "${PIPEGRID:-}" ] && tar -czf "$out/build-gpu.tar.gz" build-gpu/pipegrid build-gpu/pipegrid-torch build-gpu/validate/pipegrid-copy-probe 2>/dev/null
say "plans run: $(wc -l <"$work/matrix/plans.txt"); total $(( $(date +%s) - start )) s; results in $out/gpu-matrix.tar.gz"

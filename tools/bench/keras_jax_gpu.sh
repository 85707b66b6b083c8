#!/usr/bin/env bash
# Issue 29 on a real GPU: a user's own Keras fit on the JAX backend, profiled with tfbertperf.keras.ProfileCallback
# (probe=True), next to the what-if truth measured in the same process (tests/programs/keras_jax_fit.py), at CPU and
# GPU sizes.  Run on the lent device machine (JAX there, no TensorFlow; Keras carried as wheels in .whl/):
#   run(command="bash tools/bench/keras_jax_gpu.sh", carry=[".whl"])
# (.whl/, git-ignored, filled here once: pip download --no-deps --only-binary=:all: --python-version 3.12
#  --platform manylinux_2_28_x86_64 -d .whl keras==3.15.1 namex==0.1.0 optree==0.20.0 — the device's Python is 3.12)
# (ONLY=REGEX picks configs, REPS=N repetitions, SKIP_PIP=1 where Keras is installed.)  It writes results.jsonl (one
# line per fit), <config>.tgz (its captures and step files) and log, all packed in $OUT/all.tgz (a device call returns
# at most 8 files), results.jsonl and log beside it too.
# Read them here with `python tools/bench/bench_keras_jax_probe.py --from DIR` (DIR: the files that came back).
set -u
DEST=${OUT:-/tmp/kjgpu-out}; OUT=$(mktemp -d /tmp/kjgpu-work.XXXX); REPS=${REPS:-2}; mkdir -p "$DEST"
[ -n "${SKIP_PIP:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD KERAS_BACKEND=jax PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/log"
# config name, then keras_jax_fit.py's arguments
CONFIGS=(
  "arrays|--shape arrays"
  "wait|--shape wait"
  "numpy|--shape numpy"
  "numpy-wide|--shape numpy --hidden 8192 --layers 4"
  "compute-gpu|--shape compute --batch 1024 --hidden 8192 --examples 131072"
  "arrays-spe8|--shape arrays --steps-per-execution 8 --examples 32768 --window 64:160"
  "arrays-b256|--shape arrays --batch 256 --examples 32768"
  "wait-b256|--shape wait --batch 256 --examples 16384"
  "arrays-notrace|--shape arrays --no-python-tracer"
  "numpy-notrace|--shape numpy --no-python-tracer"
  "numpy-wide-notrace|--shape numpy --hidden 8192 --layers 4 --no-python-tracer"
  "compute-gpu-notrace|--shape compute --batch 1024 --hidden 8192 --examples 131072 --no-python-tracer"
)
for c in "${CONFIGS[@]}"; do
  name=${c%%|*}; args=${c#*|}
  [[ "$name" =~ ^(${ONLY:-.*})$ ]] || continue
  for rep in $(seq 1 "$REPS"); do
    t0=$(date +%s); rm -rf "/tmp/kj/$name/r$rep"  # one capture per logdir: a rerun's would sit beside it
    line=$(python3 tests/programs/keras_jax_fit.py $args --out "/tmp/kj/$name/r$rep" 2>>"$OUT/log" | tail -1)
    echo "[$name r$rep] $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log"
    [ -n "$line" ] && echo "{\"config\": \"$name\", \"rep\": $rep, \"fit\": $line}" >> "$OUT/results.jsonl"
  done
  tar czf "$OUT/$name.tgz" -C /tmp/kj "$name"
done
ls -la "$OUT" | tee -a "$OUT/log"
tar czf "$DEST/all.tgz" -C "$OUT" . && cp "$OUT/results.jsonl" "$OUT/log" "$DEST/"

#!/usr/bin/env bash
# GPU workflow for the CUDA runtime (the GPU machine has no Rust toolchain).
#
# On the development machine:
#   scripts/gpu/run.sh build     # cargo build --release -p runtime; stripped copy in local/gpu/runtime
#
# Then run on the GPU machine with the `run` (device) tool, carrying local/gpu
# (local/ is git-ignored; the stripped binary is ~15 MB, the carry limit is 64 MiB):
#   carry:   ["local/gpu"]
#   command: bash scripts/gpu/run.sh device
#
# `device` mode (on the GPU machine, in the checkout root): runs `runtime gpu-check` (every
# kernel vs the CPU reference + B_read and matvec bandwidth) writing gpu-check.log/json to
# $OUT, then a quick check under compute-sanitizer memcheck into $OUT/memcheck, plus
# nvidia-smi facts. Each step has its own timeout so the whole call stays under ~5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."

case "${1:-build}" in
build)
    cargo build --release -p runtime
    mkdir -p local/gpu
    objcopy --strip-debug target/release/runtime local/gpu/runtime
    ls -la local/gpu/runtime
    echo "device command: bash scripts/gpu/run.sh device   (carry [\"local/gpu\"])"
    ;;
device)
    : "${OUT:?OUT must name the output folder}"
    export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/nvidia-smi.csv" 2>&1 || true
    rc=0
    timeout "${GPU_CHECK_TIMEOUT:-170}" local/gpu/runtime gpu-check --out "$OUT" || rc=$?
    echo "gpu-check exit status: $rc" | tee -a "$OUT/status.txt"
    if [ "${SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
        mkdir -p "$OUT/memcheck"
        src=0
        timeout "${SANITIZER_TIMEOUT:-90}" compute-sanitizer --tool memcheck --error-exitcode 9 \
            local/gpu/runtime gpu-check --quick --out "$OUT/memcheck" > "$OUT/memcheck/sanitizer.txt" 2>&1 || src=$?
        echo "memcheck exit status: $src" | tee -a "$OUT/status.txt"
        tail -n 5 "$OUT/memcheck/sanitizer.txt"
    fi
    exit "$rc"
    ;;
*)
    echo "usage: $0 [build|device]" >&2
    exit 2
    ;;
esac

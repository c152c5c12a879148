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
# `build-engine` (here) then `engine` or `extras` (on the GPU machine, carry ["local/gpu"]):
# the CUDA engine through xtask; see each mode's comment.
#
# `ncu` (GPU machine): Nsight Compute stall reasons of the ffn matvecs and the durations of the
# decode step's small kernels, see the mode's comment. `ncu-src`: the same per SASS instruction
# for one decode launch of a kernel (default attention_d256_f32).
#
# `ab` (GPU machine): kernel source variants (GEMMA4_KERNEL_SRC) timed against each other with
# the same binary, mv-bench and bench alternating, output hashes compared; see the mode's comment.
#
# `variant` (either machine): a copy of the kernel sources with #defines first in common.cuh,
# for GEMMA4_KERNEL_SRC (ab, sass); see the mode's comment.
#
# `sass` (here, no GPU): registers, spills and SASS instruction counts of the kernels (see the
# mode's comment) — how a kernel change's instruction count is checked before device time.
#
# `all` (GPU machine, after `build-engine`): every check and timing of the CUDA runtime in one
# call, within a deadline: one log, one results JSON and one tarball (see the mode's comment).
#
# `device` mode (on the GPU machine, in the checkout root): runs `runtime gpu-check` (every
# kernel vs the CPU reference + B_read and matvec bandwidth) writing gpu-check.log/json to
# $OUT, then a quick check under compute-sanitizer memcheck into $OUT/memcheck, plus
# nvidia-smi facts. Each step has its own timeout so the whole call stays under ~5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."

# `build-engine` stores the binaries gzipped (local/gpu/*.gz: the working tree that travels to the
# GPU machine, carried paths included, is limited to 64 MiB); on the GPU machine each is unpacked
# beside its .gz unless a newer plain copy is there (e.g. from `build`).
unpack_bins() {
    local z
    for z in local/gpu/*.gz local/gpu/tests/*.gz; do
        [ -e "$z" ] || continue
        if [ ! -e "${z%.gz}" ] || [ "$z" -nt "${z%.gz}" ]; then
            # through a temporary file: an unpack that fails leaves no truncated binary behind
            gzip -dc "$z" > "${z%.gz}.tmp"
            chmod +x "${z%.gz}.tmp"
            mv "${z%.gz}.tmp" "${z%.gz}"
        fi
    done
}

# The engine modes' environment on the GPU machine: the CUDA libraries, the carried fixtures,
# and /work/main, the build-time workspace root from which xtask resolves goldens/ and suites/
# (insta, for bless, would otherwise run `cargo metadata` to find it).
gpu_env() {
    export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    export GEMMA4_FIXTURES="$PWD/local/gpu/fixtures"
    if [ ! -e /work/main ]; then mkdir -p /work && ln -s "$PWD" /work/main; fi
    export INSTA_WORKSPACE_ROOT=/work/main
}

case "${1:-build}" in
build)
    cargo build --release -p runtime
    mkdir -p local/gpu
    rm -f local/gpu/runtime.gz  # build-engine's copy would otherwise compete with this one
    objcopy --strip-debug target/release/runtime local/gpu/runtime
    ls -la local/gpu/runtime
    echo "device command: bash scripts/gpu/run.sh device   (carry [\"local/gpu\"])"
    ;;
device)
    unpack_bins
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
build-engine)
    # Release runtime + xtask (with the CUDA engine), stripped, plus the fixture models the
    # engine run needs, into local/gpu (carry ["local/gpu"]).
    # The binaries and the GPU unit-test binaries (the runtime's lib tests, the suites crate's
    # CUDA engine tests: `all` runs them there, as the GPU machine has no cargo) are stored
    # stripped and gzipped (`unpack_bins` restores them on the GPU machine).
    cargo build --release -p xtask -p runtime --features xtask/cuda
    mkdir -p local/gpu/fixtures/models local/gpu/tests
    rm -f local/gpu/runtime local/gpu/xtask local/gpu/tests/*
    for b in runtime xtask; do
        objcopy --strip-debug "target/release/$b" "local/gpu/$b.tmp"
        gzip -c "local/gpu/$b.tmp" > "local/gpu/$b.gz" && rm "local/gpu/$b.tmp"
    done
    # test_bin NAME CARGO-ARGS…: the one lib-test executable cargo builds for those arguments.
    test_bin() {
        local name="$1" exe
        shift
        exe="$(cargo test --release --no-run --message-format=json "$@" |
            python3 -c 'import json, sys
exes = [m["executable"] for m in map(json.loads, sys.stdin)
        if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]]
assert len(exes) == 1, exes
print(exes[0])')"
        objcopy --strip-debug "$exe" "local/gpu/tests/$name.tmp"
        gzip -c "local/gpu/tests/$name.tmp" > "local/gpu/tests/$name.gz" && rm "local/gpu/tests/$name.tmp"
    }
    test_bin runtime-lib -p runtime --lib
    test_bin suites-cuda-lib -p suites --features cuda --lib
    fx="${GEMMA4_FIXTURES:-../shared/fixtures}"
    for m in dense-target.F32 dense-target.Q4_K_M e2b-target.Q4_0 moe-target.Q4_K_M \
        dense-assistant.F32 e2b-assistant.Q8_0 moe-assistant.Q8_0; do
        cp -f "$fx/models/$m.gguf" local/gpu/fixtures/models/
    done
    # The synthetic UD-Q2_K_XL pairs (`cargo xtask fixtures` writes them under target/fixtures).
    [ -e target/fixtures/syn-dense-target.UD-Q2_K_XL.gguf ] || cargo xtask fixtures
    for f in dense e2b moe; do
        for r in target assistant; do
            cp -f "target/fixtures/syn-$f-$r.UD-Q2_K_XL.gguf" local/gpu/fixtures/models/
        done
    done
    rm -rf local/gpu/ptx
    du -sh local/gpu
    echo "device command: bash scripts/gpu/run.sh all   (carry [\"local/gpu\"]; or engine, extras)"
    ;;
engine)
    # On the GPU machine: model-check (CUDA vs f64 oracle, self-consistency) and conformance
    # with the cuda engine (smoke suite; prefill, plain, batch:4) for each fixture model; then
    # spec-check (spec:K vs plain, row invariance, acceptance vs the oracle) and conformance in
    # plain + spec:1/2/4 for each target=assistant pair (SKIP_SPEC=1 skips); MEMCHECK=1 adds
    # compute-sanitizer memcheck runs; BENCH=FORMAT adds the 12B-shaped decode bench.
    # Results: $OUT/model-check.json, $OUT/spec-check.json, $OUT/engine.log, $OUT/reports.tar.gz.
    unpack_bins
    : "${OUT:?OUT must name the output folder}"
    gpu_env
    log="$OUT/engine.log"
    models="${MODELS:-dense-target.Q4_K_M dense-target.F32 e2b-target.Q4_0 moe-target.Q4_K_M}"
    suite="${SUITE:-smoke}"
    paths=""
    for m in $models; do paths="$paths local/gpu/fixtures/models/$m.gguf"; done
    echo "== model-check" | tee -a "$log"
    timeout "${MODEL_CHECK_TIMEOUT:-100}" local/gpu/runtime model-check $paths --out "$OUT" \
        > "$OUT/model-check.log" 2>&1 || echo "model-check exit $?" | tee -a "$log"
    grep -E '"(model|max_abs_logit_diff|argmax_agree|rows|differing|repeat10_differing|load_s)"' "$OUT/model-check.log" | tr -s ' ' | tee -a "$log" || true
    mkdir -p /tmp/conf
    for m in $models; do
        echo "== conformance $m ($suite)" | tee -a "$log"
        rc=0
        timeout "${CONF_TIMEOUT:-60}" local/gpu/xtask conformance --engine cuda --quiet \
            --model "local/gpu/fixtures/models/$m.gguf" --suite "suites/$suite.toml" \
            --modes "${MODES:-prefill,plain,batch:4}" --out "/tmp/conf/$m" >> "$log" 2>&1 || rc=$?
        echo "conformance $m exit $rc" | tee -a "$log"
    done
    # spec:K (MTP speculative decoding): target=assistant pairs.
    fm=local/gpu/fixtures/models
    pairs="${SPEC_PAIRS:-$fm/dense-target.Q4_K_M.gguf=$fm/dense-assistant.F32.gguf $fm/e2b-target.Q4_0.gguf=$fm/e2b-assistant.Q8_0.gguf $fm/moe-target.Q4_K_M.gguf=$fm/moe-assistant.Q8_0.gguf}"
    if [ "${SKIP_SPEC:-0}" != 1 ]; then
        echo "== spec-check" | tee -a "$log"
        rc=0
        # Targets alone (SPEC_ALONE) get the scripted-rollback check only.
        timeout "${SPEC_TIMEOUT:-150}" local/gpu/runtime spec-check $pairs ${SPEC_ALONE-$fm/dense-target.F32.gguf} \
            --ks "${SPEC_KS:-1,2,4,8}" --out "$OUT" > "$OUT/spec-check.log" 2>&1 || rc=$?
        echo "spec-check exit $rc" | tee -a "$log"
        grep -E '"(target|ok|k|spec_equals_plain|drafted|accepted|acceptance_equal|max_abs_diff|bitwise_equal_rows|rows_compared|covered_before_after_wrap|max_abs_logit_diff|max_abs_hidden_diff|argmax_agree|tolerance|error)"' \
            "$OUT/spec-check.log" | tr -s ' ' | tr '\n' ' ' | sed 's/"target"/\n"target"/g' | tee -a "$log" || true
        echo | tee -a "$log"
        for pr in $pairs; do
            t="${pr%%=*}"; d="${pr#*=}"; m="$(basename "$t" .gguf)"
            echo "== conformance $m + $(basename "$d" .gguf) ($suite, spec)" | tee -a "$log"
            rc=0
            timeout "${CONF_TIMEOUT:-60}" local/gpu/xtask conformance --engine cuda --quiet \
                --model "$t" --draft "$d" --suite "suites/$suite.toml" \
                --modes "${SPEC_MODES:-plain,spec:1,spec:2,spec:4}" --out "/tmp/conf/spec-$m" >> "$log" 2>&1 || rc=$?
            echo "conformance spec $m exit $rc" | tee -a "$log"
        done
    fi
    if [ -n "${MEMCHECK:-}" ] && command -v compute-sanitizer >/dev/null; then
        echo "== memcheck (model-check e2b+moe, spec-check quick)" | tee -a "$log"
        rc=0
        timeout "${MEMCHECK_TIMEOUT:-150}" compute-sanitizer --tool memcheck --error-exitcode 9 \
            local/gpu/runtime model-check $fm/e2b-target.Q4_0.gguf $fm/moe-target.Q4_K_M.gguf --gen 4 \
            --out /tmp/mc > "$OUT/memcheck-model.txt" 2>&1 || rc=$?
        echo "memcheck model-check rc=$rc" | tee -a "$log"
        tail -n 3 "$OUT/memcheck-model.txt" | tee -a "$log"
        rc=0
        timeout "${MEMCHECK_TIMEOUT:-150}" compute-sanitizer --tool memcheck --error-exitcode 9 \
            local/gpu/runtime spec-check $fm/e2b-target.Q4_0.gguf=$fm/e2b-assistant.Q8_0.gguf \
            $fm/dense-target.Q4_K_M.gguf=$fm/dense-assistant.F32.gguf \
            --ks 2 --max-tokens 12 --prompts 1 --no-oracle --rollback-tokens 64 --out /tmp/mc > "$OUT/memcheck-spec.txt" 2>&1 || rc=$?
        echo "memcheck spec-check rc=$rc" | tee -a "$log"
        tail -n 3 "$OUT/memcheck-spec.txt" | tee -a "$log"
    fi
    tar czf "$OUT/reports.tar.gz" -C /tmp conf 2>/dev/null || true
    if [ -n "${BENCH:-}" ]; then
        echo "== bench" | tee -a "$log"
        timeout "${BENCH_TIMEOUT:-120}" local/gpu/runtime bench $BENCH --out "$OUT" >> "$log" 2>&1 || echo "bench exit $?" | tee -a "$log"
    fi
    ;;
extras)
    # On the GPU machine (binaries and models from `build-engine`, carry ["local/gpu"]):
    #  (i)   `xtask calibrate --engine cuda` per model of $EXTRAS_MODELS (smoke+core goldens;
    #        dense-target.F32 has no committed goldens, so the f64 oracle blesses them here
    #        first); writes goldens/<model>/budgets.toml [cuda] in this checkout (CAL_WRITE=0:
    #        --dry-run), copied to $OUT/budgets/<model>.toml; later steps then use that τ;
    #  (ii)  `xtask explain --engine cuda` on count_300 (core suite), dense-target.Q4_K_M with
    #        dense-assistant.F32, plain vs spec:4: the four experiments and the verdict;
    #  (iii) `xtask conformance --engine cuda --strict-invariance` in $STRICT_MODES (spec:4) on
    #        the smoke suite for each target=assistant pair of $SPEC_PAIRS (row invariance:
    #        verify rows vs plain decode rows on the same prefix).
    # Every step has its own timeout. Results: $OUT/extras.log (everything), one log per step
    # ($OUT/calibrate-<m>.log, explain-count_300.log, strict-<m>.log), $OUT/budgets/,
    # $OUT/extras-reports.tar.gz (conformance report.json/md), $OUT/extras-summary.txt.
    # EXTRAS_ENGINE / XTASK / FIXTURE_MODELS let a dry run use the reference engine on a
    # machine without a GPU (EXTRAS_ENGINE=reference-f32 XTASK=target/release/xtask CAL_WRITE=0).
    unpack_bins
    : "${OUT:?OUT must name the output folder}"
    gpu_env
    xt="${XTASK:-local/gpu/xtask}"
    eng="${EXTRAS_ENGINE:-cuda}"
    fm="${FIXTURE_MODELS:-local/gpu/fixtures/models}"
    log="$OUT/extras.log"
    sum="$OUT/extras-summary.txt"
    conf=/tmp/extras-conf
    rm -rf "$conf"
    mkdir -p "$OUT/budgets" "$conf"
    : > "$sum"
    # step NAME TIMEOUT CMD...: runs CMD under `timeout`, output to $OUT/NAME.log (and
    # extras.log), exit status to extras.log and the summary.
    step() {
        local name="$1" limit="$2" rc=0
        shift 2
        echo "== $name: $*" | tee -a "$log"
        timeout "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
        cat "$OUT/$name.log" >> "$log"
        [ "$rc" = 124 ] && echo "$name: TIMED OUT after ${limit}s" | tee -a "$log" "$sum"
        echo "$name exit $rc" | tee -a "$log" "$sum"
        return 0
    }
    cal_flags=""
    [ "${CAL_WRITE:-1}" = 0 ] && cal_flags="--dry-run"
    for m in ${EXTRAS_MODELS:-dense-target.Q4_K_M dense-target.F32 e2b-target.Q4_0 moe-target.Q4_K_M}; do
        if [ ! -e "goldens/$m/smoke" ]; then
            step "bless-$m" "${BLESS_TIMEOUT:-45}" "$xt" bless --accept --model "$fm/$m.gguf"
        fi
        # shellcheck disable=SC2086
        step "calibrate-$m" "${CAL_TIMEOUT:-40}" "$xt" calibrate --engine "$eng" \
            --model "$fm/$m.gguf" $cal_flags
        [ -f "goldens/$m/budgets.toml" ] && cp -f "goldens/$m/budgets.toml" "$OUT/budgets/$m.toml"
    done
    step explain-count_300 "${EXPLAIN_TIMEOUT:-150}" "$xt" explain --engine "$eng" \
        --model "$fm/dense-target.Q4_K_M.gguf" --draft "$fm/dense-assistant.F32.gguf" \
        --suite core --prompt count_300 --modes "${EXPLAIN_MODES:-plain,spec:4}"
    pairs="${SPEC_PAIRS:-$fm/dense-target.Q4_K_M.gguf=$fm/dense-assistant.F32.gguf $fm/e2b-target.Q4_0.gguf=$fm/e2b-assistant.Q8_0.gguf $fm/moe-target.Q4_K_M.gguf=$fm/moe-assistant.Q8_0.gguf}"
    for pr in $pairs; do
        t="${pr%%=*}"; d="${pr#*=}"; m="$(basename "$t" .gguf)"
        step "strict-$m" "${STRICT_TIMEOUT:-75}" "$xt" conformance --engine "$eng" --quiet \
            --strict-invariance --model "$t" --draft "$d" --suite suites/smoke.toml \
            --modes "${STRICT_MODES:-spec:4}" --out "$conf/strict-$m"
    done
    tar czf "$OUT/extras-reports.tar.gz" -C /tmp extras-conf 2>/dev/null || true
    {
        echo "== summary"
        grep -hE '^(  proposed τ|  \|Δ|.* sequences, .* positions|error)' "$OUT"/calibrate-*.log || true
        grep -hE '^(verdict|error)' "$OUT/explain-count_300.log" || true
        grep -hE '(τ = .* entries|row invariance:|pass, .* fail in|^error)' "$OUT"/strict-*.log || true
    } | tee -a "$sum" "$log"
    ;;
all)
    # On the GPU machine, after `build-engine` here (carry ["local/gpu"]): every check and timing
    # of the CUDA runtime in one call. Each step has its own timeout, and a step that would start
    # with fewer than 20 s left of ALL_BUDGET (default 560 s, inside the device tool's 600 s) is
    # skipped and listed as such:
    #  bench-1        `runtime bench` (12B Q2_K-mix decode vs the measured read roofline, batch
    #                 1–8, graph attribution: where the time goes);
    #  gpu-check      every kernel vs the CPU reference;
    #  model-check    the 7 fixture targets vs the f64 oracle, self-consistency, 10 repeats;
    #  test-*         the GPU unit tests: the runtime's lib tests, the suites crate's CUDA engine
    #                 tests (binaries from `build-engine`);
    #  conf-*         `xtask conformance --engine cuda` in prefill, plain, batch:4 on every suite
    #                 that has goldens for the model (smoke; core for the real-toolchain ones);
    #  spec-check     spec:K (K 1, 2, 4, 8) for the 6 target=assistant pairs and dense F32 alone;
    #  conf-spec-*    conformance in plain, spec:1, spec:2, spec:4 per pair (smoke);
    #  calibrate-*    `xtask calibrate --engine cuda --dry-run` on the suites with goldens;
    #  explain        `xtask explain` on count_300, dense Q4_K_M, plain vs spec:4;
    #  strict-*       `--strict-invariance` conformance in spec:4 per real-toolchain pair;
    #  memcheck-*     compute-sanitizer memcheck of gpu-check --quick, model-check (e2b, moe) and a
    #                 quick spec-check;
    #  bench-2        the bench again (run-to-run spread);
    #  bench-fast, gpu-check-fast, conf-fast-*  the bench, gpu-check --quick and the conf-*
    #                 conformance runs in the fast mode (GEMMA4_TC_DIGITS=2: two int8 digits,
    #                 engine `cuda-fast`, its own budgets);
    #  bench-long     the bench after a 2048-token prompt (the sliding layers' full window of 1024
    #                 keys, 2048+ on the full layers: attention's share at long contexts).
    # Out (the device tool returns at most 8 files): $OUT/all.log (each step's exit status and
    # seconds), $OUT/results.json (scripts/gpu/summarize.py: the figures and verdicts of every
    # step; "ok" only if all ran and passed), $OUT/all.tgz (every step's log, JSON and report).
    # Exit status 0 only when results.json says ok.
    unpack_bins
    : "${OUT:?OUT must name the output folder}"
    gpu_env
    w=/tmp/all-out
    rm -rf "$w" && mkdir -p "$w"
    : > "$w/steps.tsv"
    start=$(date +%s)
    budget="${ALL_BUDGET:-560}"
    # skipped NAME WHY: a step not run, listed as such (results.json is then not ok).
    skipped() {
        printf '%s\t0\t0\tskipped\n' "$1" >> "$w/steps.tsv"
        echo "$1: skipped ($2)" | tee -a "$w/all.log"
    }
    # step NAME LIMIT CMD…: CMD under `timeout` (cut to the time left), output to $w/NAME.log.
    step() {
        local name="$1" limit="$2" left t0 rc=0
        shift 2
        left=$((budget - ($(date +%s) - start)))
        if [ "$left" -lt 20 ]; then
            skipped "$name" deadline
            return 0
        fi
        [ "$limit" -gt $((left - 10)) ] && limit=$((left - 10))
        t0=$(date +%s)
        timeout "$limit" "$@" > "$w/$name.log" 2>&1 || rc=$?
        printf '%s\t%s\t%s\tran\n' "$name" "$rc" "$(($(date +%s) - t0))" >> "$w/steps.tsv"
        echo "$name exit $rc in $(($(date +%s) - t0)) s" | tee -a "$w/all.log"
    }
    rt=local/gpu/runtime
    xt=local/gpu/xtask
    fm=local/gpu/fixtures/models
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv > "$w/nvidia-smi.csv" 2>&1 || true
    cat "$w/nvidia-smi.csv" >> "$w/all.log"
    real="dense-target.Q4_K_M dense-target.F32 e2b-target.Q4_0 moe-target.Q4_K_M"
    syn="syn-dense-target.UD-Q2_K_XL syn-e2b-target.UD-Q2_K_XL syn-moe-target.UD-Q2_K_XL"
    pairs="dense-target.Q4_K_M=dense-assistant.F32 e2b-target.Q4_0=e2b-assistant.Q8_0 moe-target.Q4_K_M=moe-assistant.Q8_0"
    synpairs=""
    for f in dense e2b moe; do synpairs="$synpairs syn-$f-target.UD-Q2_K_XL=syn-$f-assistant.UD-Q2_K_XL"; done
    # suites_of M: the suites with committed goldens for model M.
    suites_of() {
        for s in smoke core; do
            if [ -d "goldens/$1/$s" ]; then echo "$s"; fi
        done
    }
    step bench-1 120 "$rt" bench --draft-format none --out "$w/bench-1"
    step gpu-check 150 "$rt" gpu-check --out "$w/gpucheck"
    paths=""
    for m in $real $syn; do paths="$paths $fm/$m.gguf"; done
    # shellcheck disable=SC2086
    step model-check 150 "$rt" model-check $paths --out "$w/mc"
    step test-runtime-lib 150 local/gpu/tests/runtime-lib --test-threads 1 --nocapture
    step test-suites-cuda 90 local/gpu/tests/suites-cuda-lib cuda_engine --test-threads 1 --nocapture
    # conf_runs TAG DIGITS: steps conf-TAG<suite>-<model>, conformance in prefill, plain, batch:4
    # on every suite with goldens for the model, at DIGITS int8 digits (GEMMA4_TC_DIGITS).
    conf_runs() {
        for m in $real $syn; do
            for s in $(suites_of "$m"); do
                step "conf-$1$s-$m" 90 env GEMMA4_TC_DIGITS="$2" "$xt" conformance --engine cuda \
                    --quiet --model "$fm/$m.gguf" --suite "suites/$s.toml" \
                    --modes prefill,plain,batch:4 --out "$w/conf/$1$s-$m"
            done
        done
    }
    conf_runs "" 3
    sp=""
    for pr in $pairs $synpairs; do sp="$sp $fm/${pr%%=*}.gguf=$fm/${pr#*=}.gguf"; done
    # shellcheck disable=SC2086
    step spec-check 150 "$rt" spec-check $sp "$fm/dense-target.F32.gguf" --ks 1,2,4,8 --out "$w/sc"
    for pr in $pairs $synpairs; do
        step "conf-spec-${pr%%=*}" 60 "$xt" conformance --engine cuda --quiet --model "$fm/${pr%%=*}.gguf" \
            --draft "$fm/${pr#*=}.gguf" --suite suites/smoke.toml --modes plain,spec:1,spec:2,spec:4 \
            --out "$w/conf/spec-${pr%%=*}"
    done
    for m in $real $syn; do
        ss="$(suites_of "$m")"
        [ -n "$ss" ] || continue
        # shellcheck disable=SC2046
        step "calibrate-$m" 60 "$xt" calibrate --engine cuda --model "$fm/$m.gguf" --dry-run \
            $(for s in $ss; do printf -- '--suite %s ' "$s"; done)
    done
    step explain 120 "$xt" explain --engine cuda --model "$fm/dense-target.Q4_K_M.gguf" \
        --draft "$fm/dense-assistant.F32.gguf" --suite core --prompt count_300 --modes plain,spec:4
    for pr in $pairs; do
        step "strict-${pr%%=*}" 60 "$xt" conformance --engine cuda --quiet --strict-invariance \
            --model "$fm/${pr%%=*}.gguf" --draft "$fm/${pr#*=}.gguf" --suite suites/smoke.toml \
            --modes spec:4 --out "$w/conf/strict-${pr%%=*}"
    done
    if command -v compute-sanitizer > /dev/null; then
        ms="compute-sanitizer --tool memcheck --error-exitcode 9"
        # shellcheck disable=SC2086
        step memcheck-gpu-check 120 $ms "$rt" gpu-check --quick --out /tmp/all-mc1
        # shellcheck disable=SC2086
        step memcheck-model-check 120 $ms "$rt" model-check "$fm/e2b-target.Q4_0.gguf" \
            "$fm/moe-target.Q4_K_M.gguf" --gen 4 --out /tmp/all-mc2
        # shellcheck disable=SC2086
        step memcheck-spec-check 120 $ms "$rt" spec-check "$fm/e2b-target.Q4_0.gguf=$fm/e2b-assistant.Q8_0.gguf" \
            --ks 2 --max-tokens 12 --prompts 1 --no-oracle --rollback-tokens 64 --out /tmp/all-mc3
    else
        skipped memcheck "no compute-sanitizer on PATH"
    fi
    step bench-2 120 "$rt" bench --draft-format none --out "$w/bench-2"
    # The fast mode (two int8 digits, GEMMA4_TC_DIGITS=2; engine `cuda-fast` with its own budgets):
    # the bench and conformance in prefill, plain, batch:4 on the suites with goldens.
    step bench-fast 120 env GEMMA4_TC_DIGITS=2 "$rt" bench --draft-format none --out "$w/bench-fast"
    step gpu-check-fast 150 env GEMMA4_TC_DIGITS=2 "$rt" gpu-check --quick --out "$w/gpucheck-fast"
    conf_runs fast- 2
    step bench-long 120 "$rt" bench --prompt 2048 --draft-format none --out "$w/bench-long"
    # The logs and whatever summary there is reach $OUT even if the summary fails; the mode's
    # exit status is 0 only when results.json says ok.
    python3 scripts/gpu/summarize.py "$w" "$w/results.json" 2>&1 | tee -a "$w/all.log" || true
    cp "$w/all.log" "$OUT/"
    [ -e "$w/results.json" ] && cp "$w/results.json" "$OUT/"
    tar czf "$OUT/all.tgz" -C /tmp all-out
    python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] is True else 1)' \
        "$w/results.json"
    ;;
ncu)
    # On the GPU machine (binaries from `build` or `build-engine`, carry ["local/gpu"]): Nsight
    # Compute figures of the decode step, one tarball $OUT/ncu.tgz plus $OUT/ncu-summary.txt:
    #  (i)  stall reasons, pipe utilisation and throughput (`--page raw`) of the ffn matvecs
    #       (mvtc_q2_k_1w = ffn_gate+ffn_up, mvtc_q3_k_1 = ffn_down) from `runtime mv-bench`;
    #  (ii) the duration of every attention / norm / prep launch of a short `runtime bench`
    #       (one metric, one pass each), summarised per kernel for decode-shaped grids (grid
    #       y = 1: one token) by ncu_small.py. The prefill of 32 tokens takes the first 240 of
    #       these launches (5 per layer), each decode step 240 more. (mvtc_prep is left out: the
    #       prefill's ~700 unfused preps used up a first run's 900 launches before any decode.)
    # ncu locks the clocks to base (1.35 GHz on the H200), so durations are longer than in
    # `bench`; compare them with each other. NCU_COUNT: launches of (ii) (default 1500).
    # (i) of other kernels: NCU_KERNELS (a kernel-name regex), NCU_CASE (mv-bench --case) and
    # NCU_MV_COUNT (launches), e.g. NCU_KERNELS='^mvtc_q2_k_3w$' for ffn_gate+ffn_up at n = 8;
    # with GEMMA4_KERNEL_SRC set, of that variant.
    unpack_bins
    : "${OUT:?OUT must name the output folder}"
    export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    ncu="${NCU:-/usr/local/cuda/bin/ncu}"
    o=/tmp/ncu-out
    rm -rf "$o" && mkdir -p "$o"
    timeout "${NCU_TIMEOUT:-150}" "$ncu" --section WarpStateStats --section ComputeWorkloadAnalysis \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --page raw \
        -k regex:"${NCU_KERNELS:-^mvtc_q(2_k_1w|3_k_1)\$}" -c "${NCU_MV_COUNT:-2}" \
        local/gpu/runtime mv-bench --iters 2 --case "${NCU_CASE:-ffn}" \
        > "$o/ncu-matvec.txt" 2>&1 || echo "ncu matvec exit $?" | tee -a "$o/status.txt"
    timeout "${NCU_TIMEOUT:-150}" "$ncu" --metrics gpu__time_duration.sum \
        --csv --page raw -k regex:'^(attention(_d256|_d512)?_f32|add_norm_prep_f32|qkv_post_f32|geglu_prep_f32)$' \
        -c "${NCU_COUNT:-1500}" local/gpu/runtime bench --draft-format none --prompt 32 --decode 4 \
        --out /tmp/ncu-bench > "$o/ncu-small.csv" 2> "$o/ncu-small.err" || echo "ncu small exit $?" | tee -a "$o/status.txt"
    python3 scripts/gpu/ncu_small.py "$o/ncu-small.csv" > "$o/summary.txt" 2>&1 || true
    grep -E "^mvtc_q|gpu__time_duration.sum|stalled_(barrier|math_pipe_throttle|not_selected|wait|long_scoreboard|short_scoreboard|mio_throttle|no_instruction|selected)_per_issue_active|pipe_(alu|fma|fmaheavy|lsu|tensor)_cycles_active.avg.pct_of_peak_sustained_active|sm__inst_executed.avg.per_cycle_active " \
        "$o/ncu-matvec.txt" | awk '{$1=$1};1' | awk '!seen[$0]++' >> "$o/summary.txt" || true
    cp "$o/summary.txt" "$OUT/ncu-summary.txt"
    tar czf "$OUT/ncu.tgz" -C /tmp ncu-out
    cat "$OUT/ncu-summary.txt"
    ;;
ncu-src)
    # On the GPU machine (binaries from `build` or `build-engine`, carry ["local/gpu"]): where one
    # decode-shaped launch's time goes, per SASS instruction — Nsight Compute's source counters
    # (executed instructions and warp-stall samples) of the NCU_SRC_SKIP-th launch (default 50:
    # past the 32-token prompt's 40 sliding layers) of kernel NCU_SRC_KERNEL (default
    # attention_d256_f32, the 12B sliding layers' attention; attention_f32 before) in a
    # short `runtime bench`, summarised by ncu_src.py into $OUT/ncu-src-summary.txt (totals, stall
    # reasons, regions between block barriers, the top instructions); the CSV in $OUT/ncu-src.csv.gz.
    # With GEMMA4_KERNEL_SRC set, of that variant. NCU_SRC_WARPS: the launch's warps, for the
    # per-warp figures (default 192: the attention's 16 heads × 3 splits × 4 warps at 33 keys).
    unpack_bins
    : "${OUT:?OUT must name the output folder}"
    export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    k="${NCU_SRC_KERNEL:-attention_d256_f32}"
    timeout "${NCU_TIMEOUT:-150}" "${NCU:-/usr/local/cuda/bin/ncu}" --section SourceCounters \
        --section WarpStateStats --import-source no -k regex:"^${k}\$" \
        --launch-skip "${NCU_SRC_SKIP:-50}" -c 1 --page source --print-source sass --csv \
        local/gpu/runtime bench --draft-format none --prompt 32 --decode 3 --out /tmp/ncu-src-bench \
        > /tmp/ncu-src.csv 2> "$OUT/ncu-src.err" || echo "ncu exit $?" | tee -a "$OUT/ncu-src.err"
    python3 scripts/gpu/ncu_src.py /tmp/ncu-src.csv "${NCU_SRC_WARPS:-192}" > "$OUT/ncu-src-summary.txt" 2>&1 || true
    gzip -c /tmp/ncu-src.csv > "$OUT/ncu-src.csv.gz"
    cat "$OUT/ncu-src-summary.txt"
    ;;
ab)
    # On the GPU machine (binaries from `build` or `build-engine`, carry ["local/gpu"]): kernel
    # source variants timed against each other in one call, alternating, with the same binary.
    # VARS="name:DIR ..." (DIR relative to the checkout, read through GEMMA4_KERNEL_SRC; an empty
    # DIR is the embedded sources; an optional third field ENV=VAL[,ENV=VAL…] sets environment
    # variables for that variant's runs, e.g. "nospread::GEMMA4_TC_SPREAD=0"), e.g.
    # VARS="old:local/gpu/oldsrc new:" after
    # `git archive HEAD kernels | tar x -C /tmp && cp /tmp/kernels/*.cu /tmp/kernels/*.cuh
    # local/gpu/oldsrc/`. `runtime mv-bench` (CASE: a case-name filter) ROUNDS times per variant,
    # then `runtime bench` twice per variant of BENCH_VARS (default: VARS; "none" skips), with
    # BENCH_ARGS added to its arguments (e.g. "--draft-format none --decode 64"; ROUNDS=0 skips
    # mv-bench: how the L2-prefetch variants of matvec.cu's record were timed). Writes
    # $OUT/ab-summary.txt (per case and column count the µs of every run, the kernel, and whether
    # the output hash equals the first variant's) and every log and JSON in $OUT/ab.tgz (the
    # device tool returns at most 8 files).
    unpack_bins
    : "${OUT:?OUT must name the output folder}"
    : "${VARS:?VARS must name the variants, e.g. VARS=\"old:local/gpu/oldsrc new:\"}"
    export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    o=/tmp/ab-out
    rm -rf "$o" && mkdir -p "$o"
    # written in $OUT as it grows: a call cut short by the device tool's limit keeps what ran
    s="$OUT/ab-summary.txt"
    : > "$s"
    # venv SPEC: `env` arguments for variant SPEC = DIR[:ENV=VAL,…] (the part after the name).
    venv() {
        local dir="${1%%:*}" e=""
        case "$1" in *:*) e="${1#*:}" ;; esac
        if [ -n "$dir" ]; then echo "GEMMA4_KERNEL_SRC=$PWD/$dir ${e//,/ }"; else echo "-u GEMMA4_KERNEL_SRC ${e//,/ }"; fi
    }
    rounds="${ROUNDS:-2}"
    for i in $(seq 1 "$rounds"); do
        for v in $VARS; do
            # shellcheck disable=SC2046
            timeout "${MV_TIMEOUT:-100}" env $(venv "${v#*:}") local/gpu/runtime mv-bench ${CASE:+--case "$CASE"} \
                --out "$o/mv-${v%%:*}-$i.json" > "$o/mv-${v%%:*}-$i.txt" 2>&1 || echo "mv-bench ${v%%:*} $i exit $?" >> "$s"
        done
    done
    if [ "$rounds" -gt 0 ]; then
        python3 - "$o" "$VARS" "$rounds" >> "$s" <<'PY' || echo "mv-bench summary failed (a run above wrote no JSON)" >> "$s"
import json, sys
o, names, rounds = sys.argv[1], [v.split(":")[0] for v in sys.argv[2].split()], int(sys.argv[3])
runs = {(n, i): json.load(open(f"{o}/mv-{n}-{i}.json"))["cases"] for n in names for i in range(1, rounds + 1)}
first = runs[(names[0], 1)]
for j, e in enumerate(first):
    if "us" not in e:
        continue
    line = f"{e['case'][:24]:24} n={e['ncols']}"
    for n in names:
        us = "/".join(f"{runs[(n, i)][j]['us']:.2f}" for i in range(1, rounds + 1))
        same = runs[(n, 1)][j]["y_hash"] == e["y_hash"]
        line += f"  {n} {us} {runs[(n, 1)][j]['kernel']} {'same' if same else 'DIFF'}"
    print(line)
PY
    fi
    bvars="${BENCH_VARS:-$VARS}"
    if [ "$bvars" != none ]; then
        for i in 1 2; do
            for v in $bvars; do
                n="${v%%:*}"
                # shellcheck disable=SC2046,SC2086
                timeout "${BENCH_TIMEOUT:-120}" env $(venv "${v#*:}") local/gpu/runtime bench ${BENCH_ARGS:-} --out "$o/bench-$n-$i" > "$o/bench-$n-$i.txt" 2>&1 || true
                python3 scripts/gpu/summarize.py --bench-line "$o/bench-$n-$i" "$n $i" >> "$s" \
                    || echo "bench $n $i: summarize.py failed" >> "$s"
            done
        done
    fi
    tar czf "$OUT/ab.tgz" -C /tmp ab-out
    cat "$s"
    ;;
variant)
    # Here or on the GPU machine: a kernel source folder for GEMMA4_KERNEL_SRC (the ab mode's VARS,
    # or the sass mode) that differs from kernels/ only by `#define NAME VALUE` lines put first in
    # common.cuh — the prelude of every family, so each `#ifndef` default there and in the
    # families (TC_XLAYOUT, TC_XB_1, TC_MINB_3, …) gives way. Usage: run.sh variant DIR NAME=VALUE…,
    # e.g. on the GPU machine (carry ["local/gpu"]): `bash scripts/gpu/run.sh variant
    # local/gpu/xl2 TC_XLAYOUT=2 && VARS="old: new:local/gpu/xl2" bash scripts/gpu/run.sh ab`,
    # or here: `bash scripts/gpu/run.sh variant local/gpu/xl2 TC_XLAYOUT=2 &&
    # GEMMA4_KERNEL_SRC=$PWD/local/gpu/xl2 bash scripts/gpu/run.sh sass '^mvtc_q2'`.
    dir="${2:?usage: $0 variant DIR NAME=VALUE ...}"
    shift 2
    # Replaces only a folder this mode wrote (its marker file), never other files.
    if [ -e "$dir" ] && [ ! -e "$dir/.kernel-variant" ]; then
        echo "variant: $dir exists and was not written by this mode; pick a new folder" >&2
        exit 2
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    cp kernels/*.cu kernels/*.cuh "$dir"/
    echo "$*" > "$dir/.kernel-variant"
    {
        for d in "$@"; do
            case "$d" in
            [A-Za-z_]*=*) echo "#define ${d%%=*} ${d#*=}" ;;
            *) echo "variant: '$d' is not NAME=VALUE" >&2; exit 2 ;;
            esac
        done
        cat kernels/common.cuh
    } > "$dir/common.cuh"
    echo "kernel sources with $* in $dir"
    ;;
sass)
    # Here (no GPU): registers, spills and SASS instruction counts of every kernel for sm_90, from
    # the NVRTC PTX (kernels/examples/dump_ptx.rs, GEMMA4_KERNEL_SRC honoured) through ptxas and
    # cuobjdump of pinned PyPI wheels (ptxas of CUDA 13.0.88 as on the GPU machine; cuobjdump and
    # nvdisasm 13.2.51, the oldest 13.x on PyPI) in target/cuda-tools. Optional 2nd argument: a
    # kernel-name regex, e.g. `scripts/gpu/run.sh sass '^mvtc_q[23]_k_1'`. Output in target/sass
    # (replaced every run): with SASS_AGAINST=DIR, a copy of an earlier run's (`rm -rf
    # target/sass-old && cp -r target/sass target/sass-old`), each kernel also gets the old figures and the main-loop opcode counts
    # that changed.
    tools="$PWD/target/cuda-tools"
    if [ ! -x "$tools/nvidia/cu13/bin/ptxas" ] || [ ! -x "$tools/nvidia/cu13/bin/nvdisasm" ]; then
        python3 -m pip install --quiet --disable-pip-version-check --target "$tools" \
            nvidia-cuda-nvcc==13.0.88 nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51
    fi
    nvrtc="$PWD/target/nvrtc"
    [ -d "$nvrtc/nvidia" ] || python3 -m pip install --quiet --disable-pip-version-check \
        --target "$nvrtc" nvidia-cuda-nvrtc==13.0.88
    for d in "$nvrtc"/nvidia/*/lib; do export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; done
    export PATH="$tools/nvidia/cu13/bin:$PATH"
    out="$PWD/target/sass"
    rm -rf "$out" && mkdir -p "$out"
    cargo run --release -q -p kernels --example dump_ptx -- "$out" > /dev/null
    for p in "$out"/*.ptx; do
        b="${p%.ptx}"
        ptxas -arch=sm_90 -O3 -v "$p" -o "$b.cubin" 2> "$b.ptxas"
        cuobjdump -sass "$b.cubin" > "$b.sass"
    done
    python3 scripts/gpu/sass_stats.py "$out" "${2:-.}" ${SASS_AGAINST:+--against "$SASS_AGAINST"}
    ;;
*)
    echo "usage: $0 [build|device|build-engine|all|engine|extras|ncu|ncu-src|ab|variant|sass]" >&2
    exit 2
    ;;
esac

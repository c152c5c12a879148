//! Scoring throughput of the f64 oracle (`reference::score::score`) in GFLOP/s, next to this
//! machine's f64 multiply-add peak measured in the same run by a tight loop compiled with the
//! same target features as the oracle (no FMA is requested anywhere, `model::Float`). The ratio
//! is printed first; the goal is ≥ 30 %.
//!
//! FLOPs are counted analytically from the config: 2 per multiply-add of every linear layer
//! (attention projections, MLP, MoE router and the `K` routed experts, PLE, the tied LM head) and
//! of attention (`q·k` and `p·v` over the visible keys). Model: `GEMMA4_FIXTURES`
//! (default `../shared/fixtures`) `models/dense-target.F32.gguf`; skipped when absent.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use criterion::{criterion_main, Criterion, Throughput};
use reference::config::Config;
use reference::model::Model;
use reference::score::score;

fn fixtures() -> PathBuf {
    reference::fixtures_dir()
}

/// Multiply-add FLOPs of scoring sequences of the given lengths (see the module doc).
fn score_flops(c: &Config, lens: &[usize]) -> f64 {
    let h = c.n_embd as f64;
    let mut per_token = 2.0 * h * c.n_vocab as f64;
    if c.n_embd_per_layer > 0 {
        per_token += 2.0 * h * (c.n_layer * c.n_embd_per_layer) as f64;
    }
    let mut attn_per_key = 0.0;
    let mut sliding_per_key = 0.0;
    for l in 0..c.n_layer {
        let (nh, nkv, d) = (
            c.n_head[l] as f64,
            c.n_head_kv[l] as f64,
            c.head_dim(l) as f64,
        );
        per_token += 2.0 * h * nh * d * 2.0; // q and o
        if c.has_kv(l) {
            per_token += 2.0 * h * nkv * d * if c.k_eq_v[l] { 1.0 } else { 2.0 };
        }
        per_token += 2.0 * 3.0 * h * c.n_ff[l] as f64;
        if c.moe {
            per_token += 2.0 * h * c.n_expert as f64
                + c.n_expert_used as f64 * 2.0 * 3.0 * h * c.n_ff_exp as f64;
        }
        if c.n_embd_per_layer > 0 {
            per_token += 2.0 * 2.0 * h * c.n_embd_per_layer as f64;
        }
        if c.is_swa[l] {
            sliding_per_key += 4.0 * nh * d;
        } else {
            attn_per_key += 4.0 * nh * d;
        }
    }
    let w = c.sliding_window;
    lens.iter()
        .map(|&n| {
            let keys_full: f64 = (1..=n).map(|k| k as f64).sum();
            let keys_swa: f64 = (1..=n).map(|k| k.min(w) as f64).sum();
            n as f64 * per_token + keys_full * attn_per_key + keys_swa * sliding_per_key
        })
        .sum()
}

/// User + system CPU time of this process so far (all threads), from `/proc/self/stat`
/// (fields 14 and 15, in clock ticks of 1/100 s, Linux `USER_HZ`); `None` where unavailable.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may contain spaces; fields after it follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// The 1, 5 and 15-minute load averages from `/proc/loadavg` (`"?"` where unavailable).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

/// f64 multiply-add peak of this build: 32 independent accumulators, `a ← a·m + c`; returns
/// (best wall-clock GFLOP/s, GFLOP per CPU-second).
fn madd_peak_gflops() -> (f64, f64) {
    const ACC: usize = 32;
    let iters = 20_000_000usize;
    let mut best: f64 = 0.0;
    let c0 = cpu_seconds();
    for _ in 0..3 {
        let mut acc = [1.0f64; ACC];
        let (m, c) = (black_box(0.999_999_9), black_box(1e-9));
        let t0 = Instant::now();
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = *a * m + c;
            }
        }
        let dt = t0.elapsed().as_secs_f64();
        black_box(acc);
        best = best.max(2.0 * (ACC * iters) as f64 / dt / 1e9);
    }
    // Per CPU-second as well (this loop is the only busy thread): the uncontended core's rate.
    let per_cpu = match (c0, cpu_seconds()) {
        (Some(a), Some(b)) if b > a => 3.0 * 2.0 * (ACC * iters) as f64 / (b - a) / 1e9,
        _ => best,
    };
    (best, per_cpu)
}

fn bench(cr: &mut Criterion) {
    let path = fixtures().join("models/dense-target.F32.gguf");
    if !path.exists() {
        println!("skipped: fixtures not found at {}", path.display());
        return;
    }
    let model = Model::<f64>::load(&path).expect("load");
    let seqs: Vec<Vec<u32>> = (0..4)
        .map(|s| {
            (0..256)
                .map(|t| ((t * 7 + s * 131) % 16000 + 100) as u32)
                .collect()
        })
        .collect();
    let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
    let flops = score_flops(model.config(), &lens);

    // Single-core peak (one thread of this loop); scoring uses all rayon threads.
    let threads = rayon::current_num_threads();
    let load0 = load_average();
    let (peak1, peak1_cpu) = madd_peak_gflops();
    // One untimed run first (page faults of the mmapped weights, allocator warm-up).
    black_box(score(&model, &seqs, 16).expect("score"));
    let t0 = Instant::now();
    let c0 = cpu_seconds();
    let reps = 3;
    for _ in 0..reps {
        black_box(score(&model, &seqs, 16).expect("score"));
    }
    let wall = t0.elapsed().as_secs_f64();
    let gflops = flops * reps as f64 / wall / 1e9;
    println!(
        "score: {gflops:.2} GFLOP/s on {threads} threads; f64 multiply-add peak {peak1:.2} GFLOP/s per core \
         ({:.2} for {threads}); ratio {:.1} %",
        peak1 * threads as f64,
        100.0 * gflops / (peak1 * threads as f64)
    );
    // The same work per CPU-second (user + system time of this process): independent of how
    // many cores other processes left us, so comparable across runs on a shared machine.
    if let (Some(c0), Some(c1)) = (c0, cpu_seconds()) {
        let per_cpu = flops * reps as f64 / (c1 - c0) / 1e9;
        println!(
            "score: {per_cpu:.2} GFLOP per CPU-second ({:.2} CPU-s for {:.2} s wall); peak \
             {peak1_cpu:.2} GFLOP per CPU-second; ratio {:.1} %",
            c1 - c0,
            wall,
            100.0 * per_cpu / peak1_cpu
        );
    }
    // Other processes on a shared machine lower the wall-clock figure: print the 1/5/15-minute
    // load averages before and after the measurement next to it.
    println!("load average before: {load0}; after: {}", load_average());

    let mut g = cr.benchmark_group("oracle");
    g.sample_size(10);
    g.throughput(Throughput::Elements(flops as u64));
    g.bench_function("score_dense_f32_4x256 (elements = FLOP)", |b| {
        b.iter(|| score(&model, &seqs, 16).expect("score"))
    });
    g.throughput(Throughput::Elements(2 * 32 * 1_000_000));
    g.bench_function("madd_peak_1core (elements = FLOP)", |b| {
        b.iter(|| {
            let mut acc = [1.0f64; 32];
            let (m, c) = (black_box(0.999_999_9), black_box(1e-9));
            for _ in 0..1_000_000 {
                for a in acc.iter_mut() {
                    *a = *a * m + c;
                }
            }
            black_box(acc)
        })
    });
    g.finish();
}

#[allow(missing_docs)] // the macro generates an undocumented fn
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);

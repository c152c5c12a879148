//! Dequantization throughput per block format (`reference::quant`, `spec/gguf-gemma4.md` §3).
//!
//! For each supported type: 1 Mi elements (4096 rows of 256) quantized once from a fixed
//! pseudo-random input, then `dequantize` (exact f64) and `dequantize_f32` timed. Two groups
//! per output type: `…/bytes` reports GB/s of block bytes read, `…/elements` elements/s.
//! Run: `cargo bench -p reference --bench dequant` (add `-- Q4_K` to filter).

// criterion_group!/criterion_main! generate undocumented items.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use reference::quant::{dequantize, dequantize_f32, quantize, SUPPORTED_TYPES};

const N: usize = 1 << 20;

/// Deterministic input: xorshift noise with a per-256-block magnitude, roughly like weights.
fn input() -> Vec<f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..N / 256)
        .flat_map(|_| {
            let scale = 10f64.powf(-3.0 + 2.0 * next());
            (0..256)
                .map(|_| ((2.0 * next() - 1.0) * scale) as f32)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let x = input();
    let mut out64 = vec![0f64; N];
    let mut out32 = vec![0f32; N];
    for (unit, by_bytes) in [("bytes", true), ("elements", false)] {
        let mut g64 = c.benchmark_group(format!("dequantize_f64/{unit}"));
        for ty in SUPPORTED_TYPES {
            let q = quantize(ty, &x).expect("bench input quantizes");
            g64.throughput(if by_bytes {
                Throughput::Bytes(q.len() as u64)
            } else {
                Throughput::Elements(N as u64)
            });
            g64.bench_with_input(BenchmarkId::from_parameter(ty), &q, |b, q| {
                b.iter(|| dequantize(ty, q, &mut out64).expect("dequantize"))
            });
        }
        g64.finish();
        let mut g32 = c.benchmark_group(format!("dequantize_f32/{unit}"));
        for ty in SUPPORTED_TYPES {
            let q = quantize(ty, &x).expect("bench input quantizes");
            g32.throughput(if by_bytes {
                Throughput::Bytes(q.len() as u64)
            } else {
                Throughput::Elements(N as u64)
            });
            g32.bench_with_input(BenchmarkId::from_parameter(ty), &q, |b, q| {
                b.iter(|| dequantize_f32(ty, q, &mut out32).expect("dequantize_f32"))
            });
        }
        g32.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(std::time::Duration::from_millis(300)).measurement_time(std::time::Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);

//! `runtime bench`: decode tokens/s of the CUDA engine on a 12B-shaped model (spec/gemma4-text.md
//! §13.3 shapes: H 3840, I 15360, 48 layers, 16 heads, sliding 8 KV heads × 256, full 1 KV head
//! × 512 with `attention_k_eq_v`, V 262144) made of random valid blocks of one format, against
//! the read roofline `B_read` (sum over 4 GiB) measured in the same run (toolchain notes).
//!
//! With a drafter ([`DraftOptions`]) it also times a synthetic MTP assistant of 12B-compatible
//! shapes (`spec/gemma4-assistant-mtp.md` §8, [`AssistantShape`]) drafting over the target's
//! cache, reports the drafter step cost ÷ the target decode step, and a speed-up model of
//! `spec:K` (tokens/s vs the acceptance rate `α`, [`speedup`]) from the costs measured in the
//! same run.

use std::time::Instant;

use cudarc::driver::CudaSlice;
use reference::config::Config;
use reference::quant::GgmlType;
use serde_json::json;

use crate::check::{random_blocks, Rng};
use crate::engine::{CudaEngine, EngineOptions};
use crate::error::{drv, RuntimeError};
use crate::forward::Row;
use crate::loader::{DeviceModel, LayerWeights, Mat};
use crate::ops::{format_suffix, row_bytes};
use crate::Gpu;

mod drafter;
pub mod speedup;

pub use drafter::{draft_bench, AssistantShape, DraftOptions};

/// Per-draft acceptance rates `α` of the speed-up model (inputs, not measured).
pub const ALPHAS: [f64; 6] = [0.3, 0.5, 0.6, 0.7, 0.8, 0.9];

/// Draft lengths `K` of the verify-cost and drafter measurements.
pub const DRAFT_KS: [usize; 4] = [1, 2, 4, 8];

/// The 12B text configuration of §13.3 (no PLE, no MoE, soft-cap 30).
pub fn config_12b() -> Config {
    let l = 48;
    let is_swa: Vec<bool> = (0..l).map(|i| (i + 1) % 6 != 0).collect();
    Config {
        n_layer: l,
        n_ctx_train: 262_144,
        n_embd: 3840,
        n_vocab: 262_144,
        n_ff: vec![15_360; l],
        n_head: vec![16; l],
        n_head_kv: is_swa.iter().map(|&s| if s { 8 } else { 1 }).collect(),
        k_eq_v: is_swa.iter().map(|&s| !s).collect(),
        is_swa,
        head_dim_full: 512,
        head_dim_swa: 256,
        n_rot_full: 512,
        n_rot_swa: 256,
        rope_pairs_full: 64,
        rope_base_full: 1e6,
        rope_base_swa: 1e4,
        rms_eps: 1e-6,
        sliding_window: 1024,
        n_kv_shared: 0,
        n_embd_per_layer: 0,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        final_softcap: Some(30.0),
        kv_source: (0..l).collect(),
        moe: false,
        moe_fused_gate_up: false,
        suppress_tokens: Vec::new(),
    }
}

pub use reference::quant::WeightMix;

/// Random blocks per (type, rows, cols), generated once on the host and uploaded per tensor
/// (the target here, the drafter in `crate::draft`'s `synthetic` module).
pub(crate) struct Gen {
    mix: WeightMix,
    rng: Rng,
    cache: std::collections::HashMap<(GgmlType, usize, usize), Vec<u8>>,
    bytes: usize,
}

impl Gen {
    /// A generator for the formats of `mix`, random bits from `seed`.
    pub(crate) fn new(mix: WeightMix, seed: u64) -> Gen {
        Gen {
            mix,
            rng: Rng::new(seed),
            cache: Default::default(),
            bytes: 0,
        }
    }

    /// Bytes uploaded so far.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The random-bit source (also used for non-weight data such as a token permutation).
    pub(crate) fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// A `[rows, cols]` matrix named `name` in `mix.type_for(name)`, random valid blocks.
    /// Errors: `cols` not a whole number of blocks, unsupported format, upload failure.
    pub(crate) fn mat(
        &mut self,
        gpu: &Gpu,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Mat, RuntimeError> {
        let ty = self.mix.type_for(name);
        let rb = row_bytes(ty, cols, name)?;
        let rng = &mut self.rng;
        let host = self
            .cache
            .entry((ty, rows, cols))
            .or_insert_with(|| random_blocks(ty, rows * cols, rng));
        let data = gpu
            .stream
            .clone_htod(host.as_slice())
            .map_err(drv(name.to_string()))?;
        self.bytes += host.len();
        Ok(Mat {
            name: name.into(),
            ty,
            fmt: format_suffix(ty, name)?,
            rows,
            cols,
            row_bytes: rb,
            data,
        })
    }
}

/// `[n]` f32 ones on the device (norm gains of the synthetic models).
pub(crate) fn ones(gpu: &Gpu, n: usize) -> Result<CudaSlice<f32>, RuntimeError> {
    gpu.stream.clone_htod(&vec![1f32; n]).map_err(drv("ones"))
}

/// A model of `cfg`'s shapes with random weights in the formats of `mix` (norm weights 1).
pub fn synthetic(
    gpu: &Gpu,
    cfg: Config,
    mix: WeightMix,
    seed: u64,
) -> Result<DeviceModel, RuntimeError> {
    let mut g = Gen::new(mix, seed);
    let h = cfg.n_embd;
    let mut layers = Vec::new();
    for l in 0..cfg.n_layer {
        let d = cfg.head_dim(l);
        let (nh, nkv) = (cfg.n_head[l], cfg.n_head_kv[l]);
        let sliding = cfg.is_swa[l];
        let (theta, pairs) = if sliding {
            (cfg.rope_base_swa, d / 2)
        } else {
            (cfg.rope_base_full, cfg.rope_pairs_full)
        };
        let inv: Vec<f64> = reference::model::rope::inv_freq::<f64>(theta, d, pairs);
        let kv = Some((
            g.mat(gpu, "attn_k", nkv * d, h)?,
            ones(gpu, d)?,
            if cfg.k_eq_v[l] {
                None
            } else {
                Some(g.mat(gpu, "attn_v", nkv * d, h)?)
            },
        ));
        layers.push(LayerWeights {
            attn_norm: ones(gpu, h)?,
            attn_q: g.mat(gpu, "attn_q", nh * d, h)?,
            attn_q_norm: ones(gpu, d)?,
            kv,
            attn_output: g.mat(gpu, "attn_output", h, nh * d)?,
            post_attention_norm: ones(gpu, h)?,
            ffn_norm: ones(gpu, h)?,
            ffn_gate: g.mat(gpu, "ffn_gate", cfg.n_ff[l], h)?,
            ffn_up: g.mat(gpu, "ffn_up", cfg.n_ff[l], h)?,
            ffn_down: g.mat(gpu, "ffn_down", h, cfg.n_ff[l])?,
            post_ffw_norm: ones(gpu, h)?,
            moe: None,
            ple: None,
            layer_scalar: 1.0,
            inv_freq: gpu.stream.clone_htod(&inv).map_err(drv("rope"))?,
            n_head: nh,
            n_kv: nkv,
            head_dim: d,
            n_ff: cfg.n_ff[l],
            window: sliding.then_some(cfg.sliding_window),
            kv_source: l,
        });
    }
    let token_embd = g.mat(gpu, "token_embd", cfg.n_vocab, h)?;
    Ok(DeviceModel {
        output_norm: ones(gpu, h)?,
        token_embd,
        ple: None,
        layers,
        weight_bytes: g.bytes,
        config: cfg,
    })
}

/// Whether [`synthetic`] can build `cfg` in `mix` (checked on the CPU): every weight matrix's
/// row length a whole number of blocks of its format, with a GPU kernel for that format.
///
/// Errors: [`RuntimeError::Shape`] (row length), [`RuntimeError::UnsupportedType`].
pub fn check_mix(cfg: &Config, mix: WeightMix) -> Result<(), RuntimeError> {
    let h = cfg.n_embd;
    let mut rows: Vec<(&str, usize)> = vec![("token_embd", h)];
    for l in 0..cfg.n_layer {
        rows.extend([
            ("attn_q", h),
            ("attn_k", h),
            ("attn_v", h),
            ("attn_output", cfg.n_head[l] * cfg.head_dim(l)),
            ("ffn_gate", h),
            ("ffn_up", h),
            ("ffn_down", cfg.n_ff[l]),
        ]);
    }
    check_rows(mix, &rows)
}

/// `(name, row length)` of each matrix: its format (`mix.type_for(name)`) has a GPU kernel and
/// the row is a whole number of its blocks ([`row_bytes`]).
pub(crate) fn check_rows(mix: WeightMix, rows: &[(&str, usize)]) -> Result<(), RuntimeError> {
    for &(name, k) in rows {
        let ty = mix.type_for(name);
        format_suffix(ty, name)?;
        row_bytes(ty, k, name)?;
    }
    Ok(())
}

/// `B_read` in bytes/s: best median of `sum_f32x4` over 4 GiB.
pub fn b_read(gpu: &Gpu) -> Result<f64, RuntimeError> {
    let n: usize = 1 << 30;
    let mut buf = gpu.stream.alloc_zeros::<f32>(n).map_err(drv("alloc"))?;
    gpu.fill_f32_bits(&mut buf.as_view_mut(), 1.0f32.to_bits())?;
    let blocks = (gpu.sm_count * 8) as usize;
    let mut partial = gpu
        .stream
        .alloc_zeros::<f32>(blocks)
        .map_err(drv("alloc"))?;
    let mut t = Vec::new();
    for _ in 0..8 {
        gpu.sync()?;
        let t0 = Instant::now();
        gpu.sum_probe(&buf.as_view(), &mut partial.as_view_mut())?;
        gpu.sync()?;
        t.push(t0.elapsed().as_secs_f64());
    }
    t.sort_by(|a, b| a.total_cmp(b));
    Ok((n * 4) as f64 / t[t.len() / 2])
}

/// The file `runtime bench` writes its JSON to in its output folder: `bench-<FORMAT>.json`, the
/// format in its canonical spelling ([`reference::quant::WeightMix::name`]: `--format q4_k`
/// writes `bench-Q4_K.json`, the default `bench-Q2_K_MIX.json`), so one format's runs land in
/// one file name however it was typed.
pub fn json_file_name(mix: reference::quant::WeightMix) -> String {
    format!("bench-{}.json", mix.name())
}

/// Decode benchmark: `prompt` tokens prefilled, then `decode` single-token forwards timed;
/// verify forwards of `K + 1` rows for `K` in [`DRAFT_KS`]; batches 1, 2, 4, 8; with `draft`,
/// the drafter measurement and speed-up model of [`draft_bench`] (JSON key `drafter`).
///
/// Errors: no GPU, driver/kernel errors, drafter shape errors.
pub fn run(
    mix: WeightMix,
    prompt: usize,
    decode: usize,
    draft: Option<&DraftOptions>,
) -> Result<serde_json::Value, RuntimeError> {
    let gpu = Gpu::new(0)?;
    let bread = b_read(&gpu)?;
    let t0 = Instant::now();
    let model = synthetic(&gpu, config_12b(), mix, 0x1234)?;
    let gen_s = t0.elapsed().as_secs_f64();
    let wb = model.weight_bytes;
    let batches = [1usize, 2, 4, 8];
    let mut eng = CudaEngine::from_parts(
        gpu,
        model,
        EngineOptions {
            slots: 8,
            max_ctx: prompt + decode + 64,
        },
    )?;
    let prompt_rows = |slot: usize| -> Vec<Row> {
        (0..prompt)
            .map(|i| Row {
                slot,
                token: ((i + 13 * slot) * 7919 % 262_144) as u32,
                logits: i + 1 == prompt,
            })
            .collect()
    };
    let tp = Instant::now();
    eng.forward(&prompt_rows(0))?;
    let prefill_s = tp.elapsed().as_secs_f64();
    // Before (reference point in the same run): eager launches, full logits row to the host,
    // argmax on the host.
    let base0 = eng.slot_len(0);
    let eager_n = 16.min(decode.max(1));
    eng.forward(&[Row {
        slot: 0,
        token: 5,
        logits: true,
    }])?;
    let te = Instant::now();
    let mut tok = 7u32;
    for _ in 0..eager_n {
        let lg = eng.forward(&[Row {
            slot: 0,
            token: tok,
            logits: true,
        }])?;
        tok = reference::model::logits::top_k(&lg[0], 1, &[])
            .first()
            .map_or(0, |x| x.0);
    }
    let eager_step_s = te.elapsed().as_secs_f64() / eager_n as f64;
    eng.truncate_slot(0, base0)?;
    // After: on-device top-1, graph replay, one id copied back per step.
    let one = |tok: u32| {
        [Row {
            slot: 0,
            token: tok,
            logits: true,
        }]
    };
    eng.forward_topk(&one(5), 1)?; // eager (compiles kernels)
    eng.forward_topk(&one(6), 1)?; // captured
    let td = Instant::now();
    let mut tok = 7u32;
    for _ in 0..decode {
        tok = eng.forward_topk(&one(tok), 1)?[0][0].0;
    }
    let dec_s = td.elapsed().as_secs_f64();
    let tps = decode as f64 / dec_s;
    // Verify-forward cost (spec/gemma4-assistant-mtp.md §5): one forward over K+1 rows (top-k
    // on the device, graph replay), rolled back after each, ÷ one decode step.
    let base = eng.slot_len(0);
    let step_s = dec_s / decode.max(1) as f64;
    let mut verify = Vec::new();
    let mut verify_s = Vec::new();
    for k in DRAFT_KS {
        let rows: Vec<Row> = (0..=k)
            .map(|i| Row {
                slot: 0,
                token: (i * 31 + 11) as u32,
                logits: true,
            })
            .collect();
        for _ in 0..2 {
            eng.forward_topk(&rows, 1)?;
            eng.truncate_slot(0, base)?;
        }
        let reps = 8;
        let tv = Instant::now();
        for _ in 0..reps {
            eng.forward_topk(&rows, 1)?;
            eng.truncate_slot(0, base)?;
        }
        let vs = tv.elapsed().as_secs_f64() / reps as f64;
        verify_s.push(vs);
        verify.push(
            json!({"k": k, "rows": k + 1, "verify_s": vs, "ratio_to_decode_step": vs / step_s}),
        );
    }
    // Batch scaling: b sequences (slots 0..b, each with the prompt), one token each per step.
    for s in 1..8 {
        eng.forward(&prompt_rows(s))?;
    }
    let mut batch = Vec::new();
    let bsteps = (decode / 2).max(8);
    for &b in &batches {
        let lens: Vec<usize> = (0..b).map(|s| eng.slot_len(s)).collect();
        let mut toks: Vec<u32> = (0..b as u32).map(|s| 100 + s).collect();
        let mk = |toks: &[u32]| -> Vec<Row> {
            toks.iter()
                .enumerate()
                .map(|(s, &token)| Row {
                    slot: s,
                    token,
                    logits: true,
                })
                .collect()
        };
        for _ in 0..2 {
            eng.forward_topk(&mk(&toks), 1)?;
        }
        let tb = Instant::now();
        for _ in 0..bsteps {
            let out = eng.forward_topk(&mk(&toks), 1)?;
            toks = out.iter().map(|p| p[0].0).collect();
        }
        let bs = tb.elapsed().as_secs_f64();
        for (s, &l) in lens.iter().enumerate() {
            eng.truncate_slot(s, l)?;
        }
        batch.push(
            json!({"batch": b, "steps": bsteps, "step_s": bs / bsteps as f64,
            "tok_per_s": (b * bsteps) as f64 / bs}),
        );
    }
    // slots 0..8 at their prompt lengths again: 8 rows at once against each alone
    let batch_rows =
        batch_vs_single(&mut eng, 8).unwrap_or_else(|e| json!({"error": e.to_string()}));
    let b1 = batch[0]["tok_per_s"].as_f64().unwrap_or(1.0);
    for e in batch.iter_mut() {
        let t = e["tok_per_s"].as_f64().unwrap_or(0.0);
        e["speedup_vs_batch1"] = json!(t / b1);
    }
    let ctx_mid = prompt + 1 + decode / 2;
    // K and V rows a decode step at context ctx_mid reads: every position on full layers, the
    // last W on sliding ones (f32).
    let kv_read: usize = eng
        .model()
        .layers
        .iter()
        .map(|l| 2 * l.n_kv * l.head_dim * 4 * l.window.map_or(ctx_mid, |w| w.min(ctx_mid)))
        .sum();
    let per_tok = wb + kv_read;
    let roof = bread / per_tok as f64;
    let profile = [1usize, 8]
        .iter()
        .map(|&b| kernel_profile(&mut eng, b))
        .collect::<Result<Vec<_>, _>>()?;
    let attribution = [1usize, 8]
        .iter()
        .map(|&b| graph_attribution(&mut eng, decode.max(8), b))
        .collect::<Result<Vec<_>, _>>()?;
    let drafter = match draft {
        Some(d) => draft_bench(&eng, d, ctx_mid, step_s, &verify_s)?,
        None => serde_json::Value::Null,
    };
    // Last, as it empties slot 0; an error is recorded, not raised, so that the figures above
    // still come out.
    let consistency =
        prefill_vs_decode(&mut eng).unwrap_or_else(|e| json!({"error": e.to_string()}));
    Ok(json!({
        "shape": "gemma4-12B (spec §13.3)",
        "format": mix.name(),
        "weight_bytes": wb,
        "kv_bytes_read_per_token_mid": kv_read,
        "b_read_gb_per_s": bread / 1e9,
        "random_weights_gen_upload_s": gen_s,
        "prefill_tokens": prompt,
        "prefill_s": prefill_s,
        "decode_tokens": decode,
        "decode_s": dec_s,
        "decode_tok_per_s": tps,
        "roofline_tok_per_s": roof,
        "fraction_of_roofline": tps / roof,
        "decode_step_s": step_s,
        "eager_full_logits_step_s": eager_step_s,
        "eager_full_logits_tok_per_s": 1.0 / eager_step_s,
        "verify_cost": verify,
        "batch": batch,
        "drafter": drafter,
        "kernel_profile": profile,
        "graph_attribution": attribution,
        "prefill_vs_decode": consistency,
        "batch_vs_single": batch_rows,
        "tc_digits": kernels::tc_digits(),
        "notes": "decode = CUDA graph replay per step, top-1 on the device (one id copied back); eager_full_logits = the previous path (eager launches, logits row to host); f32 activations and KV",
    }))
}

/// Tokens of [`prefill_vs_decode`]: more than `MATVEC_MAX_COLS` (8), so that their prefill is one
/// forward chunk whose matvec inputs `mvtc_prep` writes, and at most one chunk (`CHUNK_ROWS`).
const CONSISTENCY_TOKENS: usize = 24;
const _: () = assert!(
    CONSISTENCY_TOKENS > kernels::MATVEC_MAX_COLS
        && CONSISTENCY_TOKENS <= crate::forward::CHUNK_ROWS
);

/// Self-consistency at the 12B shapes: the logits of the same [`CONSISTENCY_TOKENS`] tokens (ids
/// below 1000, from an empty slot 0) from one prefill forward, whose matvec inputs `mvtc_prep`
/// writes, and from one-row decode steps, whose inputs the fused producers write
/// (`add_norm_prep_f32`, `geglu_prep_f32` and `attention_f32`'s combine — the latter with the
/// o projection's int8 digits at head_dim 256 and 512, which no fixture model has). Every row's
/// numbers are one fixed-order sum whatever the row count (`forward.rs`), so the two must be
/// bitwise equal: `{"rows", "differing", "max_abs"}` (`differing`: f32 values whose bits differ).
/// Uses slot 0 and leaves it empty (`logits_all` empties it before and after). Errors: the
/// forward's.
fn prefill_vs_decode(eng: &mut CudaEngine) -> Result<serde_json::Value, RuntimeError> {
    let seq: Vec<u32> = (0..CONSISTENCY_TOKENS as u32)
        .map(|i| (i * 37 + 5) % 1000)
        .collect();
    let prefill = eng.logits_all(&seq)?;
    let mut decode = Vec::with_capacity(seq.len());
    for &token in &seq {
        decode.extend(eng.forward(&[Row {
            slot: 0,
            token,
            logits: true,
        }])?);
    }
    eng.reset_slot(0);
    let (differing, max_abs) = crate::modelcheck::cmp(&prefill, &decode);
    Ok(json!({"rows": seq.len(), "differing": differing, "max_abs": max_abs}))
}

/// Batch rows against single rows at the bench's context: one eager forward of `batch` rows
/// (slots `0..batch`, each fed its own token; matvecs over `batch` columns and, past
/// [`crate::forward::ATT_PAIRS_MIN_KEYS`], the several-heads attention kernels) and the same rows
/// one at a time (one column, one head per block), every slot rewound to its length after each.
/// Each row's numbers are one fixed-order sum whatever the rows beside it, so the logits must be
/// bitwise equal: `{"rows", "differing", "max_abs", "several_heads_attention"}` (the last: whether
/// the batch took those kernels). Errors: the forward's.
fn batch_vs_single(eng: &mut CudaEngine, batch: usize) -> Result<serde_json::Value, RuntimeError> {
    let lens: Vec<usize> = (0..batch).map(|s| eng.slot_len(s)).collect();
    let rows: Vec<Row> = (0..batch)
        .map(|s| Row {
            slot: s,
            token: 200 + s as u32,
            logits: true,
        })
        .collect();
    let rewind = |eng: &mut CudaEngine| -> Result<(), RuntimeError> {
        for (s, &l) in lens.iter().enumerate() {
            eng.truncate_slot(s, l)?;
        }
        Ok(())
    };
    let together = eng.forward(&rows)?;
    rewind(eng)?;
    let mut alone = Vec::with_capacity(batch);
    for r in &rows {
        alone.extend(eng.forward(std::slice::from_ref(r))?);
    }
    rewind(eng)?;
    let (differing, max_abs) = crate::modelcheck::cmp(&together, &alone);
    let max_pos = lens.iter().copied().max().unwrap_or(0);
    Ok(
        json!({"rows": batch, "differing": differing, "max_abs": max_abs,
        "several_heads_attention": crate::forward::attention_pairs(batch, max_pos)}),
    )
}

/// One decode row per slot `0..batch`, slot `s` fed token `token0 + s`, logits wanted: the fixed
/// input of the profiling runs (their outputs are not looked at).
fn fixed_rows(batch: usize, token0: u32) -> Vec<Row> {
    (0..batch)
        .map(|s| Row {
            slot: s,
            token: token0 + s as u32,
            logits: true,
        })
        .collect()
}

/// Where a decode step's GPU time goes: one eager forward of `batch` rows (slots `0..batch`,
/// one token each, logits of every row) queued behind a 50 ms [`Gpu::spin`] so the GPU runs the
/// launches back to back, with an event after each ([`Gpu::profile_start`]). Returns per kernel
/// name the launch count and summed µs (kernel plus the gap before it), largest first, the total,
/// and the first layer's launches in order. The slots' lengths are restored afterwards.
///
/// Errors: driver errors of the forward or the events.
fn kernel_profile(eng: &mut CudaEngine, batch: usize) -> Result<serde_json::Value, RuntimeError> {
    let lens: Vec<usize> = (0..batch).map(|s| eng.slot_len(s)).collect();
    let rows = fixed_rows(batch, 200);
    eng.forward(&rows)?; // warm (kernels compiled, buffers touched)
    for (s, &l) in lens.iter().enumerate() {
        eng.truncate_slot(s, l)?;
    }
    eng.gpu().spin(50_000_000)?;
    eng.gpu().profile_start()?;
    let res = eng.forward(&rows);
    let prof = eng.gpu().profile_take();
    res?;
    let prof = prof?;
    for (s, &l) in lens.iter().enumerate() {
        eng.truncate_slot(s, l)?;
    }
    let total: f64 = prof.iter().map(|p| p.1).sum();
    let mut by: Vec<(String, usize, f64)> = Vec::new();
    for (name, us) in &prof {
        match by.iter_mut().find(|e| &e.0 == name) {
            Some(e) => {
                e.1 += 1;
                e.2 += us;
            }
            None => by.push((name.clone(), 1, *us)),
        }
    }
    by.sort_by(|a, b| b.2.total_cmp(&a.2));
    // The first layer: from the first add_norm_prep up to (not including) the second.
    let starts: Vec<usize> = prof
        .iter()
        .enumerate()
        .filter(|(_, p)| p.0 == "add_norm_prep_f32")
        .map(|(i, _)| i)
        .collect();
    let layer0: Vec<serde_json::Value> = match starts.as_slice() {
        [a, _, c, ..] => prof[*a..*c]
            .iter()
            .map(|(n, us)| json!({"kernel": n, "us": us}))
            .collect(),
        _ => Vec::new(),
    };
    Ok(json!({
        "batch": batch,
        "launches": prof.len(),
        "total_us": total,
        "by_kernel": by.iter().map(|(n, c, us)| json!({"kernel": n, "launches": c, "us": us, "share": us / total})).collect::<Vec<_>>(),
        "layer0": layer0,
        "notes": "eager forward queued behind a 50 ms spin; each launch timed from the event after the previous launch (kernel + gap); full logits, no top-k",
    }))
}

/// Kernel families of [`graph_attribution`]: a label, the kernel-name prefixes, and whether the
/// family is every launch *but* those (`true`).
pub const ATTRIBUTION_FAMILIES: [(&str, &[&str], bool); 10] = [
    (
        "attention",
        &[
            "attention_f32",
            "attention_d256_f32",
            "attention_d512_f32",
            "attention_d256_h2_f32",
            "attention_d512_h2_f32",
        ],
        false,
    ),
    ("qkv_post", &["qkv_post_f32"], false),
    ("add_norm_prep", &["add_norm_prep_f32"], false),
    ("geglu_prep", &["geglu_prep_f32"], false),
    (
        "matvec Q2_K (with attn_v's Q3_K in mvtcx launches)",
        &["mvtc_q2_k", "mvtcx_q2_k"],
        false,
    ),
    ("matvec Q3_K (alone)", &["mvtc_q3_k"], false),
    ("matvec Q6_K (tied head)", &["mvtc_q6_k"], false),
    (
        "head tail (final norm, gather, soft-cap, top-k)",
        &[
            "rmsnorm_f32",
            "gather_rows_f32",
            "softcap_f32",
            "topk_f32",
            "topk1_f32",
        ],
        false,
    ),
    ("every matvec", &["mvtc_", "mvtcx_"], false),
    ("every launch but the matvecs", &["mvtc_", "mvtcx_"], true),
];

/// Where a captured decode step's time goes at `batch` rows (slots `0..batch`, one token each):
/// for each of [`ATTRIBUTION_FAMILIES`], the graph-replayed step time with that family's
/// launches left out ([`crate::forward::set_skipped_kernels`]; the graph is captured again for
/// each) against the full step timed the same way before and after. `saved_s` = full − without:
/// what the step would gain if the family cost nothing, overlaps and launch gaps included (which
/// the eager [`kernel_profile`] cannot show). Each slot is fed a fixed token (outputs of a step
/// with skipped kernels are wrong, and a non-finite top-k is ignored); the slots' lengths are
/// restored after each step.
///
/// Errors: driver errors of the forwards.
fn graph_attribution(
    eng: &mut CudaEngine,
    steps: usize,
    batch: usize,
) -> Result<serde_json::Value, RuntimeError> {
    let base: Vec<usize> = (0..batch).map(|s| eng.slot_len(s)).collect();
    let rows = fixed_rows(batch, 7);
    let time = |eng: &mut CudaEngine, skip: &[&str], all_but: bool| -> Result<f64, RuntimeError> {
        crate::forward::set_skipped_kernels(skip, all_but);
        eng.drop_graphs();
        let run = |eng: &mut CudaEngine| -> Result<(), RuntimeError> {
            let r = eng.forward_topk(&rows, 1);
            for (s, &l) in base.iter().enumerate() {
                eng.truncate_slot(s, l)?;
            }
            match r {
                Ok(_) | Err(RuntimeError::NonFinite { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        };
        let res = (|| {
            run(eng)?; // eager
            run(eng)?; // captured
            let t = Instant::now();
            for _ in 0..steps {
                run(eng)?;
            }
            Ok(t.elapsed().as_secs_f64() / steps as f64)
        })();
        crate::forward::set_skipped_kernels(&[], false);
        eng.drop_graphs();
        res
    };
    let full0 = time(eng, &[], false)?;
    let mut fams = Vec::new();
    for (label, prefixes, all_but) in ATTRIBUTION_FAMILIES {
        fams.push((label, time(eng, prefixes, all_but)?));
    }
    let full1 = time(eng, &[], false)?;
    let full = 0.5 * (full0 + full1);
    Ok(json!({
        "batch": batch,
        "steps": steps,
        "full_step_s": [full0, full1],
        "families": fams.iter().map(|(l, s)| json!({"family": l, "step_s": s, "saved_s": full - s, "saved_share": (full - s) / full})).collect::<Vec<_>>(),
        "notes": "graph replay, slots 0..batch at the bench's context; a family's launches left out of the captured step (wrong outputs, timing only); saved = mean full step - step without",
    }))
}

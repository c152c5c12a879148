//! `cargo xtask inspect FILE` — a readable dump of a GGUF file in the spirit of gguf-py's
//! `gguf-dump`: header, metadata (long arrays and strings abbreviated), tensor table, per-type
//! totals, layout warnings. Container layout: `spec/gguf-gemma4.md` §1, §2, §4.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use reference::config::{AssistantConfig, Config};
use reference::gguf::{sha256_file, Array, GgufFile, Value};

/// Flags of `inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// GGUF file; any shard `<prefix>-NNNNN-of-MMMMM.gguf` opens the whole split model.
    pub file: PathBuf,
    /// Array elements shown before abbreviating to "… (n elements)".
    #[arg(long, default_value_t = 8)]
    pub max_elems: usize,
    /// Characters of a string value shown before abbreviating.
    #[arg(long, default_value_t = 120)]
    pub max_chars: usize,
    /// Print the SHA-256 of every file.
    #[arg(long)]
    pub sha256: bool,
    /// Fail (exit 2, after the dump) when the tensor layout is not canonical (llama.cpp would
    /// refuse the file) or a Gemma-4 file's derived config cannot be read (without `--strict`
    /// the dump shows `derived config: error: …` and exits 0), or a weight is NaN/Inf (the
    /// dump's `non-finite weights:` line names the first: tensor, block, field), or a Gemma-4
    /// target's tokenizer cannot be built (e.g. `tokenizer.ggml.bos_token_id` missing or
    /// outside the vocabulary: the key is named).
    #[arg(long)]
    pub strict: bool,
    /// Skip the NaN/Inf scan of every weight (the dump's `non-finite weights:` line says `not
    /// checked`): the scan reads every block of the file, about 0.3 s for a 5 GiB model in the
    /// page cache and a few seconds from disk. Not with `--strict`, which checks the weights.
    #[arg(long, conflicts_with = "strict")]
    pub no_scan: bool,
}

/// The result of the non-finite scan as the dump shows it.
#[derive(Debug, Clone, Copy)]
enum Scan<'a> {
    /// `--no-scan`: not run.
    Skipped,
    /// Every weight finite.
    Clean,
    /// The first NaN/Inf field (`reference::quant::check_finite`).
    First(&'a reference::quant::NonFiniteError),
}

impl<'a> Scan<'a> {
    /// `nonfinite` (the scan's error, if any) as shown, or [`Scan::Skipped`] with `--no-scan`.
    fn of(args: &Args, nonfinite: Option<&'a reference::quant::NonFiniteError>) -> Scan<'a> {
        match (args.no_scan, nonfinite) {
            (true, _) => Scan::Skipped,
            (false, None) => Scan::Clean,
            (false, Some(e)) => Scan::First(e),
        }
    }
}

/// The non-finite scan of `f` unless `args.no_scan`: the first NaN/Inf field, if any.
fn scan(f: &GgufFile, args: &Args) -> Option<reference::quant::NonFiniteError> {
    if args.no_scan {
        return None;
    }
    reference::quant::check_finite(f).err()
}

/// Runs the verb: open, scan the weights (unless `--no-scan`), render, print; with
/// `--strict`, then the layout, config, non-finite and tokenizer checks.
pub fn run(args: &Args) -> Result<()> {
    let f = crate::open_gguf(None, &args.file)?;
    let nonfinite = scan(&f, args);
    print!(
        "{}",
        render_with(&f, args, Scan::of(args, nonfinite.as_ref()))?
    );
    if args.strict {
        f.require_canonical_layout()
            .with_context(|| format!("{}: layout", args.file.display()))?;
        if let Some(e) = config_error(&f) {
            anyhow::bail!("{}: derived config: {e}", args.file.display());
        }
        if let Some(e) = nonfinite {
            anyhow::bail!("{}: non-finite weight: {e}", args.file.display());
        }
        if let Some(e) = tokenizer_error(&f) {
            anyhow::bail!("{}: tokenizer: {e}", args.file.display());
        }
    }
    Ok(())
}

/// Why the tokenizer of a Gemma-4 target `f` cannot be built as every verb that loads the
/// model builds it (`reference::tokenizer::GemmaTokenizer::from_gguf`: the vocabulary arrays,
/// `tokenizer.ggml.bos_token_id`, `eos_token_id` and `unknown_token_id` present and inside the
/// vocabulary, the merges, the chat template), naming the key; `None` when it can, or for
/// another architecture (an assistant's tokenizer is not read).
fn tokenizer_error(f: &GgufFile) -> Option<String> {
    match f.get_str("general.architecture").ok()? {
        "gemma4" => reference::tokenizer::GemmaTokenizer::from_gguf(f)
            .err()
            .map(|e| e.to_string()),
        _ => None,
    }
}

/// Why the derived Gemma-4 (or assistant) config of `f` cannot be read, or `None` when it can
/// or the file is not Gemma-4 (what [`derived_config`] shows as `error: …`).
fn config_error(f: &GgufFile) -> Option<String> {
    match f.get_str("general.architecture").ok()? {
        "gemma4" => Config::from_gguf(f).err().map(|e| e.to_string()),
        "gemma4-assistant" => AssistantConfig::from_gguf(f).err().map(|e| e.to_string()),
        _ => None,
    }
}

/// Characters of one array element shown before cutting it.
const ELEM_CHARS: usize = 40;

/// A string quoted with Debug escaping, cut after `max_chars` characters of the string itself
/// (before escaping, so an escape is never split), with its length when cut.
fn show_str(s: &str, max_chars: usize) -> String {
    let n = s.chars().count();
    if n > max_chars {
        let head: String = s.chars().take(max_chars).collect();
        format!("{head:?}… ({n} chars)")
    } else {
        format!("{s:?}")
    }
}

/// A value for display: strings (string array elements included) cut after `max_chars`
/// characters, other array elements after [`ELEM_CHARS`], arrays after `max_elems` elements,
/// each with the full length.
fn show_value(v: &Value, max_elems: usize, max_chars: usize) -> String {
    match v {
        Value::String(s) => show_str(s, max_chars),
        Value::Array(a) => {
            let n = a.len();
            let mut out = String::from("[");
            for i in 0..n.min(max_elems) {
                if i > 0 {
                    out.push_str(", ");
                }
                if let Array::String(v) = a {
                    out.push_str(&show_str(&v[i], max_chars));
                    continue;
                }
                let e = a.display_elem(i).unwrap_or_default();
                if e.chars().count() > ELEM_CHARS {
                    out.extend(e.chars().take(ELEM_CHARS));
                    out.push('…');
                } else {
                    out.push_str(&e);
                }
            }
            if n > max_elems {
                out.push_str(if max_elems == 0 { "…" } else { ", …" });
            }
            out.push(']');
            out
        }
        v => v.to_string(),
    }
}

/// The whole dump as text.
#[cfg(test)]
pub fn render(f: &GgufFile, args: &Args) -> Result<String> {
    let nonfinite = scan(f, args);
    render_with(f, args, Scan::of(args, nonfinite.as_ref()))
}

/// [`render`] given the result of the non-finite scan, shown as the `non-finite weights:` line.
fn render_with(f: &GgufFile, args: &Args, nonfinite: Scan<'_>) -> Result<String> {
    let mut o = String::new();
    let paths = f.shard_paths();
    writeln!(o, "{}", args.file.display())?;
    for (i, p) in paths.iter().enumerate() {
        let name = p.map_or("<memory>".into(), |p| p.display().to_string());
        write!(
            o,
            "  shard {i}: {name}  {} bytes  data_start {}",
            f.shard_len(i),
            f.data_start(i)
        )?;
        if args.sha256 {
            if let Some(p) = p {
                write!(o, "  sha256 {}", sha256_file(p)?)?;
            }
        }
        writeln!(o)?;
    }
    writeln!(
        o,
        "GGUF v{}  alignment {}  {} keys  {} tensors  {} file(s)",
        f.version(),
        f.alignment(),
        f.n_keys(),
        f.tensors().len(),
        f.n_shards()
    )?;

    writeln!(o, "\nmetadata:")?;
    // names as errors show them (control characters escaped, long names cut: a hostile file
    // writes no escape sequence to the terminal)
    let shown = reference::gguf::shown;
    let kw = f
        .metadata()
        .map(|(k, _)| shown(k).chars().count())
        .max()
        .unwrap_or(0);
    for (i, (k, v)) in f.metadata().enumerate() {
        let k = shown(k);
        let ty = match v {
            Value::Array(a) => format!("{}[{}]", a.elem_type(), a.len()),
            v => v.value_type().to_string(),
        };
        writeln!(
            o,
            "  {i:4}  {k:kw$}  {ty:14}  {}",
            show_value(v, args.max_elems, args.max_chars)
        )?;
    }

    writeln!(o, "\ntensors:")?;
    let nw = f
        .tensors()
        .iter()
        .map(|t| shown(&t.name).chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        o,
        "  {:>4}  {:nw$}  {:8}  {:24}  {:>12}  {:>12}  {:>5}",
        "#", "name", "type", "ne (GGUF order)", "bytes", "offset", "shard"
    )?;
    let mut totals: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for (i, t) in f.tensors().iter().enumerate() {
        let dims = format!(
            "[{}]",
            t.dims
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        writeln!(
            o,
            "  {i:4}  {:nw$}  {:8}  {dims:24}  {:12}  {:12}  {:5}",
            shown(&t.name),
            t.ggml_type.name(),
            t.n_bytes,
            t.offset,
            t.shard
        )?;
        let e = totals.entry(t.ggml_type.name()).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
    }

    writeln!(o, "\nper-type totals:")?;
    let (mut n_all, mut b_all) = (0usize, 0u64);
    for (ty, (n, b)) in &totals {
        writeln!(o, "  {ty:8}  {n:5} tensors  {b:14} bytes")?;
        n_all += n;
        b_all += b;
    }
    writeln!(o, "  {:8}  {n_all:5} tensors  {b_all:14} bytes", "total")?;

    if !f.layout_warnings().is_empty() {
        writeln!(o, "\nlayout warnings:")?;
        for w in f.layout_warnings() {
            writeln!(o, "  {w}")?;
        }
    }

    match nonfinite {
        Scan::Skipped => writeln!(o, "\nnon-finite weights: not checked (--no-scan)")?,
        Scan::Clean => writeln!(o, "\nnon-finite weights: none")?,
        Scan::First(e) => writeln!(o, "\nnon-finite weights: first: {e}")?,
    }

    // ── HOOK(config): the derived Gemma-4 configuration (reference::config, written by
    // another helper) is appended here. Replace the body of `derived_config` below; keep
    // this call.
    if let Some(cfg) = derived_config(f) {
        writeln!(o, "\nderived config:\n{cfg}")?;
    }
    Ok(o)
}

/// HOOK(config): text of the derived Gemma-4 (or assistant) configuration for `f`, or `None`
/// when `general.architecture` is not `gemma4` / `gemma4-assistant`. Read with
/// `reference::config::Config::from_gguf` / `AssistantConfig::from_gguf` (`spec/gguf-gemma4.md`
/// §5.1, §8.1; per-layer attributes `spec/gemma4-text.md` §1.2); a config error is shown as text.
fn derived_config(f: &GgufFile) -> Option<String> {
    match f.get_str("general.architecture").ok()? {
        "gemma4" => Some(match Config::from_gguf(f) {
            Ok(c) => render_config(&c),
            Err(e) => format!("  error: {e}\n"),
        }),
        "gemma4-assistant" => Some(match AssistantConfig::from_gguf(f) {
            Ok(c) => render_assistant(&c),
            Err(e) => format!("  error: {e}\n"),
        }),
        _ => None,
    }
}

/// Optional value for display (`-` when absent).
fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The per-layer table and model-wide values of a target [`Config`].
fn render_config(c: &Config) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "  L {}  H {}  V {}  ctx {}  rms_eps {:e}  softcap {}  embed scale sqrt(H) = {}",
        c.n_layer,
        c.n_embd,
        c.n_vocab,
        c.n_ctx_train,
        c.rms_eps,
        opt(c.final_softcap),
        (c.n_embd as f64).sqrt()
    );
    let _ = writeln!(
        o,
        "  rope: full theta {} ({} of {} pairs rotated, proportional), sliding theta {} (all pairs); window W {}",
        c.rope_base_full,
        c.rope_pairs_full,
        c.head_dim_full / 2,
        c.rope_base_swa,
        c.sliding_window
    );
    let _ = writeln!(
        o,
        "  KV sharing: last {} layers reuse (first reuse layer F = {})",
        c.n_kv_shared,
        c.first_reuse_layer()
    );
    let _ = writeln!(
        o,
        "  PLE: {}",
        if c.n_embd_per_layer > 0 {
            format!("P = {}", c.n_embd_per_layer)
        } else {
            "off".to_string()
        }
    );
    let _ = writeln!(
        o,
        "  MoE: {}",
        if c.moe {
            format!(
                "E = {}, K = {}, Ie = {}, gate/up {}",
                c.n_expert,
                c.n_expert_used,
                c.n_ff_exp,
                if c.moe_fused_gate_up {
                    "fused"
                } else {
                    "split"
                }
            )
        } else {
            "off".to_string()
        }
    );
    let _ = writeln!(o, "  suppressed ids: {}", c.suppress_tokens.len());
    let _ = writeln!(
        o,
        "  {:>5}  {:7}  {:>4}  {:>3}  {:>4}  {:>9}  {:>6}  {:>6}",
        "layer", "kind", "nh", "nkv", "d", "kv", "k_eq_v", "ffn"
    );
    for l in 0..c.n_layer {
        let kv = if c.has_kv(l) {
            "own".to_string()
        } else {
            format!("reuse {}", c.kv_source[l])
        };
        let _ = writeln!(
            o,
            "  {l:5}  {:7}  {:4}  {:3}  {:4}  {kv:>9}  {:>6}  {:6}",
            if c.is_swa[l] { "sliding" } else { "full" },
            c.n_head[l],
            c.n_head_kv[l],
            c.head_dim(l),
            if c.k_eq_v[l] { "yes" } else { "no" },
            c.n_ff[l]
        );
    }
    o
}

/// The per-layer table and model-wide values of an [`AssistantConfig`].
fn render_assistant(c: &AssistantConfig) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "  assistant: L {}  H {}  H_out {}  V {}  ctx {}  rms_eps {:e}  softcap {}",
        c.n_layer,
        c.n_embd,
        c.n_embd_out,
        c.n_vocab,
        c.n_ctx_train,
        c.rms_eps,
        opt(c.final_softcap)
    );
    let _ = writeln!(
        o,
        "  rope: full theta {} ({} of {} pairs rotated), sliding theta {}; window W {}; shared KV layers {}",
        c.rope_base_full,
        c.rope_pairs_full,
        c.head_dim_full / 2,
        c.rope_base_swa,
        c.sliding_window,
        c.n_kv_shared
    );
    let _ = writeln!(
        o,
        "  ordered embeddings: {}  centroids: {}  centroid top-k: {}",
        c.use_ordered_embeddings,
        opt(c.num_centroids),
        opt(c.centroid_intermediate_top_k)
    );
    let _ = writeln!(
        o,
        "  {:>5}  {:7}  {:>4}  {:>3}  {:>4}  {:>6}",
        "layer", "kind", "nh", "nkv", "d", "ffn"
    );
    for l in 0..c.n_layer {
        let _ = writeln!(
            o,
            "  {l:5}  {:7}  {:4}  {:3}  {:4}  {:6}",
            if c.is_swa[l] { "sliding" } else { "full" },
            c.n_head[l],
            c.n_head_kv[l],
            c.head_dim(l),
            c.n_ff[l]
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// String array elements follow `--max-chars` like string values, cut before escaping (so
    /// `\n` stays whole); `--max-elems 0` shows `[…]`. Expected texts written by hand.
    #[test]
    fn show_value_cuts_strings_and_arrays() {
        let strings = Value::Array(Array::String(vec!["abcdef".into(), "x\ny".into()]));
        assert_eq!(show_value(&strings, 8, 3), r#"["abc"… (6 chars), "x\ny"]"#);
        assert_eq!(
            show_value(&strings, 8, 1),
            r#"["a"… (6 chars), "x"… (3 chars)]"#
        );
        assert_eq!(show_value(&strings, 0, 3), "[…]");
        assert_eq!(show_value(&strings, 1, 120), r#"["abcdef", …]"#);
        let nums = Value::Array(Array::U32(vec![1, 2, 3]));
        assert_eq!(show_value(&nums, 2, 120), "[1, 2, …]");
        assert_eq!(
            show_value(&Value::String("\n\n\n".into()), 0, 2),
            r#""\n\n"… (3 chars)"#
        );
    }

    /// A Gemma-4 file whose config cannot be derived: plain inspect dumps it (exit 0, the
    /// error shown in the dump), `--strict` refuses it naming the file (it exited 0 too).
    #[test]
    fn strict_refuses_a_config_error() {
        let dir = std::env::temp_dir().join(format!("inspect-strict-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("broken.gguf");
        let mut w = reference::gguf::GgufWriter::new();
        w.set("general.architecture", Value::String("gemma4".into()));
        w.write_file(&file).unwrap();
        let mut args = Args {
            file: file.clone(),
            max_elems: 8,
            max_chars: 120,
            sha256: false,
            strict: false,
            no_scan: false,
        };
        let f = GgufFile::open(&file).unwrap();
        let why = config_error(&f).expect("a config error");
        assert!(render(&f, &args)
            .unwrap()
            .contains(&format!("derived config:\n  error: {why}\n")));
        run(&args).unwrap();
        args.strict = true;
        assert_eq!(
            run(&args).unwrap_err().to_string(),
            format!("{}: derived config: {why}", file.display())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A NaN weight is named in the dump's `non-finite weights:` line (exit 0), and
    /// `--strict` refuses the file naming it; a clean file shows `none`.
    #[test]
    fn strict_refuses_a_nonfinite_weight() {
        let dir = std::env::temp_dir().join(format!("inspect-nonfinite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("nan.gguf");
        let mut w = reference::gguf::GgufWriter::new();
        w.set("general.architecture", Value::String("test".into()));
        let mut data: Vec<u8> = [1.0f32, 2.0, f32::NAN, 4.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        w.add_tensor(
            "clean.weight",
            &[4],
            reference::quant::GgmlType::F32,
            vec![0; 16],
        )
        .unwrap();
        w.add_tensor(
            "bad.weight",
            &[4],
            reference::quant::GgmlType::F32,
            std::mem::take(&mut data),
        )
        .unwrap();
        w.write_file(&file).unwrap();
        let mut args = Args {
            file: file.clone(),
            max_elems: 8,
            max_chars: 120,
            sha256: false,
            strict: false,
            no_scan: false,
        };
        let f = GgufFile::open(&file).unwrap();
        let text = render(&f, &args).unwrap();
        assert!(
            text.contains("\nnon-finite weights: first: tensor 'bad.weight' (F32): element 2"),
            "{text}"
        );
        run(&args).unwrap();
        args.strict = true;
        let e = run(&args).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: non-finite weight: tensor 'bad.weight'",
                file.display()
            )),
            "{e}"
        );
        let clean = dir.join("clean.gguf");
        let mut w = reference::gguf::GgufWriter::new();
        w.set("general.architecture", Value::String("test".into()));
        w.add_tensor(
            "clean.weight",
            &[4],
            reference::quant::GgmlType::F32,
            vec![0; 16],
        )
        .unwrap();
        w.write_file(&clean).unwrap();
        let text = render(&GgufFile::open(&clean).unwrap(), &args).unwrap();
        assert!(text.contains("\nnon-finite weights: none\n"), "{text}");
        // --no-scan: the NaN file's dump says the weights were not checked, and plain inspect
        // exits 0
        args.strict = false;
        args.file = file.clone();
        args.no_scan = true;
        let text = render(&f, &args).unwrap();
        assert!(
            text.contains("\nnon-finite weights: not checked (--no-scan)\n"),
            "{text}"
        );
        run(&args).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A Gemma-4 target whose `tokenizer.ggml.bos_token_id` is missing or outside the
    /// vocabulary (every verb that loads it refuses it) passes plain inspect (exit 0) and
    /// fails `--strict` naming the file and the key (it passed: strict checked only layout,
    /// config and weights). The dense fixture, copied with that one key changed.
    #[test]
    fn strict_refuses_a_bad_bos_token_id() {
        let fx = reference::fixtures_dir();
        let model = fx.join("models/dense-target.Q4_K_M.gguf");
        if !model.exists() {
            println!("skipped: fixtures not found at {}", fx.display());
            return;
        }
        let src = GgufFile::open(&model).unwrap();
        let vocab = src.get_array_str("tokenizer.ggml.tokens").unwrap().len();
        let dir = std::env::temp_dir().join(format!("inspect-bos-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        const BOS: &str = "tokenizer.ggml.bos_token_id";
        // the fixture with each metadata value mapped by `edit` (None: the key left out)
        let copy_with = |name: &str, edit: &dyn Fn(&str, &Value) -> Option<Value>| {
            let mut w = reference::gguf::GgufWriter::new();
            for (k, v) in src.metadata() {
                if let Some(v) = edit(k, v) {
                    w.set(k, v);
                }
            }
            for t in src.tensors() {
                w.add_tensor(&t.name, &t.dims, t.ggml_type, src.tensor_data(t).to_vec())
                    .unwrap();
            }
            let p = dir.join(name);
            w.write_file(&p).unwrap();
            p
        };
        let copy = |name: &str, bos: Option<u32>| {
            copy_with(name, &|k, v| match k {
                BOS => bos.map(Value::U32),
                _ => Some(v.clone()),
            })
        };
        let args = |file: PathBuf, strict: bool| Args {
            file,
            max_elems: 8,
            max_chars: 120,
            sha256: false,
            strict,
            no_scan: false,
        };
        let out = copy("out.gguf", Some(vocab as u32));
        run(&args(out.clone(), false)).unwrap();
        assert_eq!(
            run(&args(out.clone(), true)).unwrap_err().to_string(),
            format!(
                "{}: tokenizer: {BOS} = {vocab} is outside the vocabulary of {vocab} tokens",
                out.display()
            )
        );
        let missing = copy("missing.gguf", None);
        run(&args(missing.clone(), false)).unwrap();
        let e = run(&args(missing.clone(), true)).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: tokenizer: ", missing.display())) && e.contains(BOS),
            "{e}"
        );
        // the key in range: passes
        run(&args(copy("ok.gguf", Some(2)), true)).unwrap();
        // 100 more tokens than token_embd.weight has rows (a bos id among them): ids the
        // tokenizer gives that the model cannot embed (score and conformance then failed at
        // the first such id, conformance with exit 1) fail --strict, as every verb's load
        let grown = copy_with("grown.gguf", &|k, v| {
            Some(match (k, v) {
                ("tokenizer.ggml.tokens", Value::Array(Array::String(t))) => {
                    let mut t = t.clone();
                    t.extend((0..100).map(|i| format!("<extra_{i}>")));
                    Value::Array(Array::String(t))
                }
                ("tokenizer.ggml.scores", Value::Array(Array::F32(x))) => {
                    Value::Array(Array::F32([x.as_slice(), &[0.0; 100]].concat()))
                }
                ("tokenizer.ggml.token_type", Value::Array(Array::I32(x))) => {
                    Value::Array(Array::I32([x.as_slice(), &[1; 100]].concat()))
                }
                (BOS, _) => Value::U32(vocab as u32 + 16),
                _ => v.clone(),
            })
        });
        run(&args(grown.clone(), false)).unwrap();
        assert_eq!(
            run(&args(grown.clone(), true)).unwrap_err().to_string(),
            format!(
                "{}: tokenizer: tokenizer.ggml.tokens has {} tokens but token_embd.weight has \
                 {vocab} rows: ids from {vocab} on have no embedding",
                grown.display(),
                vocab + 100
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `--no-scan` and `--strict` exclude each other (strict checks the weights); either alone
    /// parses.
    #[test]
    fn no_scan_conflicts_with_strict() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let e = Cli::try_parse_from(["inspect", "m.gguf", "--strict", "--no-scan"])
            .err()
            .expect("a conflict");
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        for flag in ["--strict", "--no-scan"] {
            let cli = Cli::try_parse_from(["inspect", "m.gguf", flag]).unwrap();
            assert_eq!(
                (cli.args.strict, cli.args.no_scan),
                (flag == "--strict", flag == "--no-scan")
            );
        }
    }

    /// The split fixture (README-tokenizer-dequant.md §5): 3 files, 6 tensors, the F32
    /// total 8192 + 256 bytes, string arrays shown in full when short.
    #[test]
    fn dump_of_the_split_fixture_lists_shards_tensors_and_totals() {
        let dir = reference::fixtures_dir();
        let file = dir.join("split/model-00003-of-00003.gguf");
        if !file.exists() {
            println!("skipped: fixtures not found at {}", dir.display());
            return;
        }
        let args = Args {
            file,
            max_elems: 8,
            max_chars: 120,
            sha256: false,
            strict: true,
            no_scan: false,
        };
        let f = GgufFile::open(&args.file).expect("open");
        let text = render(&f, &args).expect("render");
        assert!(text.contains("6 tensors  3 file(s)"), "{text}");
        assert!(text.contains(r#"["sliding", "full"]"#), "{text}");
        assert!(
            text.contains("F32           2 tensors            8448 bytes"),
            "{text}"
        );
        assert!(
            text.contains("total         6 tensors           34048 bytes"),
            "{text}"
        );
    }
}

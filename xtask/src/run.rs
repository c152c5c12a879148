//! `cargo xtask run` (feature `cuda`): greedy generation with the CUDA engine, streaming each
//! token's text as it is produced, then prefill and decode tokens/s.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use reference::config::Config;
use reference::model::LoadOptions;
use reference::tokenizer::{ChatMessage, GemmaTokenizer};
use runtime::forward::Row;
use runtime::{CudaEngine, EngineOptions};

/// Flags of `run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model GGUF.
    #[arg(long)]
    pub model: PathBuf,
    /// Prompt text.
    #[arg(long, value_parser = crate::Text)]
    pub prompt: String,
    /// Apply the chat template (one user turn, thinking off).
    #[arg(long)]
    pub chat: bool,
    /// Maximum generated tokens (at least 1).
    // (the prefill row already gives one token, so 0 could only be honoured by not running the
    // model at all)
    #[arg(long, default_value_t = 64, value_parser = crate::at_least_one)]
    pub max_tokens: usize,
}

/// The greedy pick of one logits row (`[n_vocab]`): the largest logit outside `suppressed`
/// (sorted ids), the lowest id on equal logits. A row with a NaN or infinite logit is an error
/// naming the output index and how many there are (as the suites' engines judge it,
/// conformance §9), never a silent token.
fn pick(row: &[f32], suppressed: &[u32], index: usize) -> anyhow::Result<u32> {
    let bad = row.iter().filter(|v| !v.is_finite()).count();
    if bad > 0 {
        anyhow::bail!("non-finite logits at output index {index} ({bad} NaN/Inf)");
    }
    let mut best: Option<(u32, f32)> = None;
    for (i, &v) in row.iter().enumerate() {
        if suppressed.binary_search(&(i as u32)).is_ok() {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i as u32, v));
        }
    }
    best.map(|b| b.0)
        .ok_or_else(|| anyhow::anyhow!("output index {index}: every logit is suppressed"))
}

/// Runs the verb: the model file is opened once, for the tokenizer and the engine
/// ([`CudaEngine::from_gguf_with`]).
pub fn run(a: &Args) -> anyhow::Result<()> {
    let file = crate::open_gguf(Some("model"), &a.model)?;
    let config = Config::from_gguf(&file)
        .with_context(|| format!("Gemma-4 config of {}", a.model.display()))?;
    let tok = GemmaTokenizer::from_gguf(&file)
        .with_context(|| format!("tokenizer of {}", a.model.display()))?;
    let prompt = if a.chat {
        tok.encode_chat(&[ChatMessage::new("user", &a.prompt)], true, false)?
    } else {
        tok.encode(&a.prompt, true)?
    };
    let t0 = Instant::now();
    let mut eng = CudaEngine::from_gguf_with(
        &file,
        config,
        EngineOptions {
            slots: 1,
            // saturating: `--max-tokens 18446744073709551615` panicked with an add overflow
            max_ctx: (prompt.len().saturating_add(a.max_tokens).saturating_add(1))
                .min(runtime::forward::MAX_CTX),
        },
        LoadOptions::default(),
    )
    .with_context(|| format!("loading {}", a.model.display()))?;
    eprintln!(
        "loaded {} on {} in {:.2} s ({} prompt tokens)",
        a.model.display(),
        eng.gpu().name,
        t0.elapsed().as_secs_f64(),
        prompt.len()
    );
    let stop = tok.stop_ids();
    let suppressed = eng.suppressed_ids().to_vec();
    let n = prompt.len();
    let rows = Row::prompt(0, &prompt);
    let tp = Instant::now();
    let lg = eng.forward(&rows)?;
    let prefill_s = tp.elapsed().as_secs_f64();
    let mut next = pick(&lg[0], &suppressed, 0)?;
    let mut out = vec![next];
    let mut stdout = std::io::stdout();
    write!(stdout, "{}", tok.decode(&[next])?)?;
    stdout.flush()?;
    let td = Instant::now();
    while out.len() < a.max_tokens && !stop.contains(&next) {
        let lg = eng.forward(&[Row {
            slot: 0,
            token: next,
            logits: true,
        }])?;
        next = pick(&lg[0], &suppressed, out.len())?;
        out.push(next);
        write!(stdout, "{}", tok.decode(&[next])?)?;
        stdout.flush()?;
    }
    let decode_s = td.elapsed().as_secs_f64();
    println!();
    eprintln!(
        "prefill {} in {:.3} s ({:.1} tok/s); decode {} in {:.3} s ({:.1} tok/s)",
        crate::count(n, "token"),
        prefill_s,
        n as f64 / prefill_s,
        crate::count(out.len() - 1, "token"),
        decode_s,
        (out.len() - 1) as f64 / decode_s.max(1e-9)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-built rows: the largest unsuppressed logit wins, the lower id on a tie; a NaN or an
    /// infinity anywhere in the row is an error naming the index and the count.
    #[test]
    fn pick_is_greedy_and_refuses_non_finite_rows() {
        assert_eq!(pick(&[0.5, 2.0, 1.0], &[], 0).unwrap(), 1);
        assert_eq!(pick(&[0.5, 2.0, 1.0], &[1], 0).unwrap(), 2);
        assert_eq!(pick(&[3.0, 1.0, 3.0], &[], 0).unwrap(), 0);
        let e = pick(&[0.5, f32::NAN, f32::INFINITY], &[], 7).unwrap_err();
        assert_eq!(
            e.to_string(),
            "non-finite logits at output index 7 (2 NaN/Inf)"
        );
        assert!(pick(&[1.0], &[0], 0).is_err());
    }
}

//! Loading refuses goldens that no `cargo xtask bless` run writes (`design/conformance.md` §9):
//! a tampered copy of a committed golden — `goldens/syn-dense-target.UD-Q2_K_XL/smoke/story`,
//! which needs no fixture model — in a temp folder. Expected values come from the committed
//! files and `suites/smoke.toml` as this test reads them (the prompt's `max_tokens` and the
//! suite's stop ids from the suite file, the tokens from the sidecar's JSON), never from the
//! loader: the untouched copy loads with the sidecar's own tokens; an empty token list (as
//! written earlier from a NaN model), a continuation cut short without a stop id, a stop id
//! inside the output, a sidecar with one top-k row fewer than tokens, a snapshot with one
//! margin fewer, a sidecar logit edited so its margin no longer matches the snapshot's, and a
//! wrong sidecar schema are each refused naming the file, the prompt and what is wrong; so are
//! an empty top-k row (named by index), a sidecar of another suite or oracle version (stale:
//! re-bless) and a snapshot whose `prompt_tokens` or one output token differs from the sidecar
//! (the prompt's length, or the index and both tokens, named), a token that is not its top-k
//! row's argmax and a top-k id outside the vocabulary (the sidecar named); a
//! continuation cut short on a stop id (the legitimate early end) loads.

use std::path::{Path, PathBuf};

use suites::golden::{load_goldens, RowLimits};
use suites::suite::Suite;

const STEM: &str = "syn-dense-target.UD-Q2_K_XL";
const ID: &str = "story";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The committed golden's sidecar as JSON, its snapshot text and the model SHA-256 it pins.
fn committed() -> (serde_json::Value, String, String) {
    let dir = workspace().join("goldens").join(STEM).join("smoke");
    let side: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{ID}.oracle.json"))).unwrap(),
    )
    .unwrap();
    let snap = std::fs::read_to_string(dir.join(format!("{ID}.snap"))).unwrap();
    let sha = side["model_sha256"].as_str().unwrap().to_string();
    (side, snap, sha)
}

/// The snapshot text with its `tokens` and `margins` lists replaced (the lines before
/// `tokens:` kept), written as insta writes lists.
fn snap_with(snap: &str, tokens: &[u64], margins: &[String]) -> String {
    let head = &snap[..snap.find("\ntokens:").unwrap() + 1];
    let list = |key: &str, items: Vec<String>| {
        if items.is_empty() {
            format!("{key}: []\n")
        } else {
            format!(
                "{key}:\n{}",
                items
                    .iter()
                    .map(|v| format!("  - {v}\n"))
                    .collect::<String>()
            )
        }
    };
    head.to_string()
        + &list("tokens", tokens.iter().map(|t| t.to_string()).collect())
        + &list("margins", margins.to_vec())
}

/// The snapshot's margin lines as written (`  - 0.07234`).
fn snap_margins(snap: &str) -> Vec<String> {
    let at = snap.find("\nmargins:\n").unwrap() + "\nmargins:\n".len();
    snap[at..]
        .lines()
        .map_while(|l| l.strip_prefix("  - ").map(str::to_string))
        .collect()
}

/// The synthetic models' vocabulary size, from the committed fixture manifest.
fn vocab() -> usize {
    let m: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("goldens/fixtures-manifest.json")).unwrap(),
    )
    .unwrap();
    m["n_vocab"].as_u64().unwrap() as usize
}

fn tokens_of(side: &serde_json::Value) -> Vec<u64> {
    side["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

/// Writes `side` and `snap` as the golden of `story` in a fresh folder `dir/name` and loads it
/// for the smoke suite's `story` prompt.
fn load(
    dir: &Path,
    name: &str,
    suite: &Suite,
    side: &serde_json::Value,
    snap: &str,
    sha: &str,
) -> Result<Vec<u32>, String> {
    load_top_k(dir, name, suite, side, snap, sha, suite.settings.top_k)
}

/// [`load`] for a suite whose `top_k` is `top_k`.
fn load_top_k(
    dir: &Path,
    name: &str,
    suite: &Suite,
    side: &serde_json::Value,
    snap: &str,
    sha: &str,
    top_k: usize,
) -> Result<Vec<u32>, String> {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join(format!("{ID}.oracle.json")),
        serde_json::to_string_pretty(side).unwrap(),
    )
    .unwrap();
    std::fs::write(d.join(format!("{ID}.snap")), snap).unwrap();
    let prompt = suite.prompt(ID).unwrap().clone();
    load_goldens(
        &d,
        &suite.settings.name,
        &[prompt],
        &suite.settings.stop_ids,
        sha,
        RowLimits::new(vocab(), &[], top_k),
    )
    .map(|g| g[ID].tokens.clone())
    .map_err(|e| e.to_string())
}

#[test]
fn impossible_goldens_are_refused_naming_file_and_problem() {
    let suite = Suite::load(workspace().join("suites/smoke.toml")).unwrap();
    let max_tokens = suite.prompt(ID).unwrap().max_tokens;
    let stop = suite.settings.stop_ids.clone();
    let (side, snap, sha) = committed();
    let tokens = tokens_of(&side);
    let margins = snap_margins(&snap);
    // the committed golden is a full-length run without a stop id (what the cases below cut)
    assert_eq!(tokens.len(), max_tokens, "story: {tokens:?}");
    assert!(tokens.iter().all(|t| !stop.contains(&(*t as u32))));
    assert_eq!(margins.len(), tokens.len());

    let dir = std::env::temp_dir().join(format!("golden-impossible-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let snap_path = |name: &str| dir.join(name).join(format!("{ID}.snap"));
    let side_path = |name: &str| dir.join(name).join(format!("{ID}.oracle.json"));

    // untouched: loads, with the sidecar's tokens
    let want: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
    assert_eq!(load(&dir, "ok", &suite, &side, &snap, &sha), Ok(want));

    // the first `n` tokens (rows, margins) of the golden, token `n - 1` replaced by `last`,
    // which then heads its row in place of the old token (same logits: same margin)
    let cut = |n: usize, last: Option<u64>| {
        let mut s = side.clone();
        let mut t = tokens[..n].to_vec();
        let mut rows = side["top_k"].as_array().unwrap()[..n].to_vec();
        if let (Some(l), Some(x), Some(row)) = (last, t.last_mut(), rows.last_mut()) {
            *x = l;
            assert!(row.as_array().unwrap().iter().all(|e| e[0] != l), "{row}");
            row[0][0] = serde_json::json!(l);
        }
        s["tokens"] = serde_json::json!(t);
        s["top_k"] = serde_json::json!(rows);
        let sn = snap_with(&snap, &t, &margins[..n]);
        (s, sn)
    };

    // `tokens: []` in both files (a NaN model's golden): prefill was judged "exact" against it
    let (s, sn) = cut(0, None);
    let e = load(&dir, "empty", &suite, &s, &sn, &sha).unwrap_err();
    assert!(
        e.starts_with(&snap_path("empty").display().to_string()),
        "{e}"
    );
    assert!(e.contains(&format!("prompt \"{ID}\": impossible golden: no output tokens, but the prompt's max_tokens is {max_tokens}")), "{e}");
    assert!(e.contains("cargo xtask bless --prompts story"), "{e}");

    // cut to 10 tokens, the last not a stop id
    let (s, sn) = cut(10, None);
    let e = load(&dir, "short", &suite, &s, &sn, &sha).unwrap_err();
    assert!(
        e.starts_with(&snap_path("short").display().to_string()),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "10 output tokens of max_tokens {max_tokens}, and the last ({}) is not a stop id {stop:?}",
            tokens[9]
        )),
        "{e}"
    );

    // cut to 10 tokens ending on a stop id: a legitimate early end
    let (s, sn) = cut(10, Some(u64::from(stop[0])));
    let mut want: Vec<u32> = tokens[..10].iter().map(|&t| t as u32).collect();
    want[9] = stop[0];
    assert_eq!(load(&dir, "stopped", &suite, &s, &sn, &sha), Ok(want));

    // a stop id inside a full-length output: generation would have ended there
    let mut s = side.clone();
    let mut t = tokens.clone();
    t[4] = u64::from(stop[0]);
    s["tokens"] = serde_json::json!(t);
    let sn = snap_with(&snap, &t, &margins);
    let e = load(&dir, "inner-stop", &suite, &s, &sn, &sha).unwrap_err();
    assert!(
        e.contains(&format!(
            "output 4 is the stop id {} but the output goes on after it ({max_tokens} tokens;",
            stop[0]
        )),
        "{e}"
    );

    // a sidecar with one top-k row fewer than its tokens
    let mut s = side.clone();
    s["top_k"].as_array_mut().unwrap().pop();
    let e = load(&dir, "rows", &suite, &s, &snap, &sha).unwrap_err();
    assert!(
        e.starts_with(&side_path("rows").display().to_string()),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "{max_tokens} tokens but {} top-k rows",
            max_tokens - 1
        )),
        "{e}"
    );

    // a snapshot with one margin fewer than its tokens
    let sn = snap_with(&snap, &tokens, &margins[1..]);
    let e = load(&dir, "margins", &suite, &side, &sn, &sha).unwrap_err();
    assert!(
        e.starts_with(&snap_path("margins").display().to_string()),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "{max_tokens} output tokens but {} margins",
            max_tokens - 1
        )),
        "{e}"
    );

    // a sidecar whose runner-up logit at output 3 was lowered by 1: its margin grows by 1, the
    // snapshot's stays (the top-k stays sorted, the tokens agree)
    let mut s = side.clone();
    let second = &mut s["top_k"][3][1][1];
    *second = serde_json::json!(second.as_f64().unwrap() - 1.0);
    let e = load(&dir, "logit", &suite, &s, &snap, &sha).unwrap_err();
    assert!(
        e.starts_with(&side_path("logit").display().to_string()),
        "{e}"
    );
    // the new margin to 4 significant digits, rounded by the formatter (`{:.3e}`)
    let row = &s["top_k"][3];
    let margin = row[0][1].as_f64().unwrap() - row[1][1].as_f64().unwrap();
    let rounded: f64 = format!("{margin:.3e}").parse().unwrap();
    assert!(
        e.contains(&format!(
            "output 3: the sidecar's top-2 margin rounds to {rounded}, the reviewed snapshot"
        )),
        "{e}"
    );
    assert!(e.contains(&format!("says {}", margins[3])), "{e}");

    // another schema
    let mut s = side.clone();
    s["schema"] = serde_json::json!("golden-oracle/0");
    let e = load(&dir, "schema", &suite, &s, &snap, &sha).unwrap_err();
    assert!(
        e.starts_with(&side_path("schema").display().to_string()),
        "{e}"
    );
    assert!(
        e.contains("schema \"golden-oracle/0\", expected \"golden-oracle/1\""),
        "{e}"
    );

    // a sidecar of another suite (copied from goldens/<model>/core/): refused naming both
    let mut s = side.clone();
    s["suite"] = serde_json::json!("core");
    let e = load(&dir, "suite", &suite, &s, &snap, &sha).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: malformed golden: the sidecar is suite \"core\"'s, not \"smoke\"'s (copied from \
             another suite's goldens folder?)",
            side_path("suite").display()
        )
    );

    // a sidecar of another oracle version: stale, re-bless (plain bless rewrites it)
    let mut s = side.clone();
    s["oracle_version"] = serde_json::json!("reference-f64 0.0.9");
    let e = load(&dir, "version", &suite, &s, &snap, &sha).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: prompt \"story\": stale golden: written by oracle \"reference-f64 0.0.9\", \
             this is {:?}; re-bless it (`cargo xtask bless --prompts story`)",
            side_path("version").display(),
            suites::golden::ORACLE_VERSION
        )
    );

    // an empty top-k row: named by its index (it said "N tokens but N top-k rows (or an empty
    // row)")
    let mut s = side.clone();
    s["top_k"][5] = serde_json::json!([]);
    let e = load(&dir, "empty-row", &suite, &s, &snap, &sha).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: malformed golden: top-k row 5 (of output token 5) is empty",
            side_path("empty-row").display()
        )
    );

    // a top-k row narrower than the suite's top_k (16; bless writes 16): row 5 cut to its first
    // 8 ids (its top-2 margin, the snapshot's, unchanged) loaded and judged with a bound from the
    // 8th id; refused naming the sidecar and the row
    assert_eq!(suite.settings.top_k, 16);
    assert_eq!(side["top_k"][5].as_array().unwrap().len(), 16);
    let mut s = side.clone();
    s["top_k"][5].as_array_mut().unwrap().truncate(8);
    let e = load(&dir, "narrow-row", &suite, &s, &snap, &sha).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: prompt \"story\": impossible golden: top-k row 5 (of output token 5) lists 8 \
             ids, fewer than the 16 the suite's top_k = 16 asks for (of {} ids that are not \
             suppressed; was [suite] top_k raised since the golden was blessed?); re-bless it \
             (`cargo xtask bless --prompts story`)",
            side_path("narrow-row").display(),
            vocab()
        )
    );
    // the committed golden (16 ids a row) for a suite whose top_k was raised to 32: re-bless
    let e = load_top_k(&dir, "raised", &suite, &side, &snap, &sha, 32).unwrap_err();
    assert!(
        e.contains("top-k row 0 (of output token 0) lists 16 ids, fewer than the 32 the suite's top_k = 32 asks for")
            && e.ends_with("re-bless it (`cargo xtask bless --prompts story`)"),
        "{e}"
    );
    // and lowered to 8: the wider rows load
    assert!(load_top_k(&dir, "lowered", &suite, &side, &snap, &sha, 8).is_ok());

    // the snapshot's prompt_tokens one more than the sidecar's prompt: the prompt's length is
    // named as what differs (it said "sidecar (N tokens) disagrees with … (N tokens)")
    let plen = side["prompt"].as_array().unwrap().len();
    let line = format!("\nprompt_tokens: {plen}\n");
    assert!(snap.contains(&line), "{snap}");
    let sn = snap.replacen(&line, &format!("\nprompt_tokens: {}\n", plen + 1), 1);
    let e = load(&dir, "prompt-len", &suite, &side, &sn, &sha).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: malformed golden: the sidecar disagrees with the reviewed snapshot {}: the \
             prompt's length differs: the sidecar's prompt has {plen} tokens, the snapshot's \
             prompt_tokens is {}; re-run `cargo xtask bless` and review",
            side_path("prompt-len").display(),
            snap_path("prompt-len").display(),
            plen + 1
        )
    );

    // the snapshot's output token 7 changed: the index and both tokens are named
    let mut t = tokens.clone();
    t[7] += 1;
    let sn = snap_with(&snap, &t, &margins);
    let e = load(&dir, "token", &suite, &side, &sn, &sha).unwrap_err();
    assert!(
        e.contains(&format!(
            "the sidecar disagrees with the reviewed snapshot {}: output token 7 differs: {} in \
             the sidecar, {} in the snapshot;",
            snap_path("token").display(),
            tokens[7],
            tokens[7] + 1
        )),
        "{e}"
    );
    // output token 3 replaced, in both files, by its row's runner-up (a tampered or stale
    // golden: the token is not the oracle's argmax there): refused naming the sidecar (the
    // run named only the suite file)
    let mut s = side.clone();
    let mut t = tokens.clone();
    let (top, second) = (
        side["top_k"][3][0][0].as_u64().unwrap(),
        side["top_k"][3][1][0].as_u64().unwrap(),
    );
    assert_eq!(top, tokens[3]);
    t[3] = second;
    s["tokens"] = serde_json::json!(t);
    let sn = snap_with(&snap, &t, &margins);
    let e = load(&dir, "argmax", &suite, &s, &sn, &sha).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: prompt \"story\": impossible golden: output 3: token {second} is not the top of \
             its row (id {top} is); re-bless it (`cargo xtask bless --prompts story`)",
            side_path("argmax").display()
        )
    );

    // an exact tie listed higher id first (the row's last two: its margin stays the
    // snapshot's): no greedy run lists it so — the oracle takes, and lists, the lower id first
    let mut s = side.clone();
    let row = s["top_k"][6].as_array_mut().unwrap();
    let last = row.len() - 1;
    assert!(last >= 2, "{row:?}");
    let (a, b) = (
        row[last - 1][0].as_u64().unwrap(),
        row[last][0].as_u64().unwrap(),
    );
    let (hi, lo) = (a.max(b), a.min(b));
    row[last][1] = row[last - 1][1].clone();
    row[last - 1][0] = serde_json::json!(hi);
    row[last][0] = serde_json::json!(lo);
    let e = load(&dir, "tie", &suite, &s, &snap, &sha).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: prompt \"story\": impossible golden: output 6: ids {hi} and {lo} tie exactly \
             but the higher is listed first (greedy takes the lower id); re-bless it (`cargo \
             xtask bless --prompts story`)",
            side_path("tie").display()
        )
    );

    // a top-k id outside the model's vocabulary (the row's last, so the row stays sorted and
    // its margin the snapshot's)
    let mut s = side.clone();
    let row = s["top_k"][6].as_array_mut().unwrap();
    let last = row.len() - 1;
    row[last][0] = serde_json::json!(vocab());
    let e = load(&dir, "vocab", &suite, &s, &snap, &sha).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: prompt \"story\": impossible golden: output 6: top-k id {} is outside the \
             vocabulary ({}); re-bless it (`cargo xtask bless --prompts story`)",
            side_path("vocab").display(),
            vocab(),
            vocab()
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

//! `cargo xtask llama-server`: builds llama.cpp's `llama-server` (CPU) from the llama.cpp sources
//! vendored in the `llama-cpp-python` source distribution on PyPI (pinned version and SHA-256),
//! under `target/ext/`, and starts it on a free loopback port, ready for
//! `cargo xtask conformance --engine llama-server=http://127.0.0.1:PORT` (`suites::http`).
//!
//! Layout: `target/ext/dl/<sdist>.tar.gz`, `target/ext/llama_cpp_python-<v>/vendor/llama.cpp`
//! (sources), `target/ext/llama.cpp-build/bin/llama-server` (binary, [`server_binary`]).
//! Only the server target is built (`LLAMA_BUILD_TESTS/EXAMPLES=OFF`, `--target
//! llama-server`), at `nice -n 19`.
//!
//! Every argument is checked before anything is built or started ([`check_args`]): one
//! `error: …` line, exit 2. The server started in the foreground is stopped when xtask is
//! (SIGINT, SIGTERM, SIGHUP: [`catch_stop_signals`]) and on every error path ([`ServerGuard`]);
//! with `--detach` it keeps running once it answers.

use std::ffi::c_int;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use reference::config::{AssistantConfig, Config, ConfigError};
use reference::gguf::GgufFile;
use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGTERM};

use crate::conformance::{default_fixture, workspace_root};

/// The pinned `llama-cpp-python` release: its vendored llama.cpp (ggml 0.25.3) knows the
/// `gemma4` and `gemma4-assistant` architectures (`src/llama-arch.cpp`) and MTP drafting
/// (`--spec-type draft-mtp`).
pub const LLAMA_CPP_PYTHON_VERSION: &str = "0.3.36";
/// SHA-256 of `llama_cpp_python-0.3.36.tar.gz` as published on PyPI.
pub const SDIST_SHA256: &str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e";

/// Largest value of a count llama-server reads (`--spec-draft-n-max`, `-np`, `-c`): it parses
/// them as a C `int`.
pub const MAX_SERVER_INT: usize = i32::MAX as usize;

/// Largest `--jobs`: more compile jobs than this is a typo, not a machine.
pub const MAX_JOBS: usize = 1024;

/// Flags of `llama-server`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only build (or check) the binary; do not start a server. `--model` and `--draft`, when
    /// given, are still checked (a target, and a drafter that pairs with it).
    #[arg(long, conflicts_with_all = ["detach", "port", "parallel", "ctx", "server_bin", "extra"])]
    pub build_only: bool,
    /// Model GGUF to serve: a Gemma-4 target (`gemma4`) (default:
    /// $GEMMA4_FIXTURES/models/dense-target.F32.gguf).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// MTP drafter GGUF (`gemma4-assistant`) that pairs with the model: serve with --spec-type
    /// draft-mtp.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Draft tokens per round with --draft, 1 or more (the engine spec then needs `spec=K`).
    #[arg(long, default_value_t = 4, requires = "draft")]
    pub spec_k: usize,
    /// Port on 127.0.0.1, free, 1 to 65535 (default: a free one).
    #[arg(long)]
    pub port: Option<u32>,
    /// Server slots (parallel sequences; `batch:N` needs N ≤ slots), 1 to 256 (llama.cpp's
    /// most sequences).
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Context size (all slots together), at least --parallel (one token per slot); 0: the
    /// model's trained context (llama-server's `-c 0`).
    #[arg(long, default_value_t = 8192)]
    pub ctx: usize,
    /// Compile jobs (1 to 1024).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// A llama-server binary to run instead of building one under target/ext (it must know the
    /// gemma4 architectures).
    #[arg(long, conflicts_with = "jobs")]
    pub server_bin: Option<PathBuf>,
    /// Start the server in the background (pid and log under target/ext/) and return.
    #[arg(long)]
    pub detach: bool,
    /// Serve a model (or drafter) with NaN/Inf weights anyway, for forensic use (conformance
    /// §9): by default the check stops at the first one, naming tensor, block and field (exit
    /// 2), as every verb that loads a model does.
    #[arg(long)]
    pub allow_nonfinite: bool,
    /// Extra arguments for llama-server (after `--`).
    #[arg(last = true)]
    pub extra: Vec<std::ffi::OsString>,
}

/// Why `llama-server`'s arguments are refused: checked before anything is built or started.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// A count outside the range the server (or the build) takes.
    #[error("--{flag} {value}: must be in {min}..={max} ({why})")]
    OutOfRange {
        /// The flag, without dashes.
        flag: &'static str,
        /// The value given.
        value: usize,
        /// Smallest value taken.
        min: usize,
        /// Largest value taken.
        max: usize,
        /// What the bound is for.
        why: &'static str,
    },
    /// `--ctx` smaller than `--parallel`: llama-server gives each slot `ctx / parallel` tokens.
    #[error(
        "--ctx {ctx} is smaller than --parallel {parallel}: each of the {parallel} slots gets ctx / parallel tokens, which would be 0"
    )]
    CtxBelowSlots {
        /// `--ctx`.
        ctx: usize,
        /// `--parallel`.
        parallel: usize,
    },
    /// `--port 0` (the server would pick a port of its own, not the one printed) or above 65535.
    #[error("--port {0}: give a port from 1 to 65535, or leave --port out for a free one")]
    PortRange(u32),
    /// The port given cannot be bound on 127.0.0.1 (in use, or privileged).
    #[error("--port {port}: cannot listen on 127.0.0.1:{port}: {source}")]
    PortUnavailable {
        /// The port.
        port: u16,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The default model (no `--model`) cannot be found.
    #[error("{0}")]
    NoDefaultModel(String),
    /// `--server-bin` names no regular file (`no such file`, `is a directory, not a file`, …),
    /// in the wording of every verb's file flags.
    #[error(transparent)]
    Missing(#[from] suites::conformance::NotAFile),
    /// `--model` or `--draft` names no regular file or no readable GGUF
    /// ([`crate::open_gguf`], the wording of every verb).
    #[error(transparent)]
    Gguf(#[from] crate::FileArgError),
    /// `--model` is not a Gemma-4 target (an assistant, another architecture, a bad header).
    #[error("--model {}: not a Gemma-4 target model (gemma4): {source}", path.display())]
    NotTarget {
        /// The path given.
        path: PathBuf,
        /// Why its configuration cannot be derived.
        source: Box<ConfigError>,
    },
    /// `--draft` is not an MTP drafter.
    #[error(
        "--draft {}: not an MTP drafter (gemma4-assistant): {source}",
        path.display()
    )]
    NotDrafter {
        /// The path given.
        path: PathBuf,
        /// Why its assistant configuration cannot be derived.
        source: Box<ConfigError>,
    },
    /// A weight of the model or drafter is NaN or ±Inf (the load check of every verb that
    /// loads a model, `reference::quant::check_finite`; skipped with `--allow-nonfinite`).
    #[error(
        "--{flag} {}: {first}; --allow-nonfinite serves it anyway, for forensic use",
        path.display()
    )]
    NonFinite {
        /// `model` or `draft`.
        flag: &'static str,
        /// The path given.
        path: PathBuf,
        /// The first non-finite field: tensor, block, field (in the message, not a separate
        /// cause: the hint follows it).
        first: Box<reference::quant::NonFiniteError>,
    },
    /// The drafter does not fit the target (`AssistantConfig::check_pairing`).
    #[error("--draft {} does not pair with --model {}: {source}", draft.display(), model.display())]
    Pairing {
        /// The drafter.
        draft: PathBuf,
        /// The target.
        model: PathBuf,
        /// What differs.
        source: Box<ConfigError>,
    },
}

/// What [`check_args`] resolved: the files to serve (absolute, without `..`, so the printed
/// judge command works from any folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The target model (`None`: `--build-only` without `--model` or `--draft`).
    pub model: Option<PathBuf>,
    /// The drafter and its draft tokens per round.
    pub draft: Option<(PathBuf, usize)>,
    /// `--port`, checked (1 to 65535, free when checked); `None` without it or with
    /// `--build-only`.
    pub port: Option<u16>,
}

/// `value` within `min..=max`, else [`ArgError::OutOfRange`] naming `flag`.
fn in_range(
    flag: &'static str,
    value: usize,
    (min, max): (usize, usize),
    why: &'static str,
) -> Result<(), ArgError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ArgError::OutOfRange {
            flag,
            value,
            min,
            max,
            why,
        })
    }
}

/// `path` absolute and without `..` when it can be resolved (it exists), else as given.
fn absolute(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Every argument of the verb, checked before anything is built or started: the counts
/// (`--spec-k`, `--parallel`, `--ctx`, `--jobs`, `--port`), `--server-bin`, the model (a GGUF
/// whose Gemma-4 target configuration derives; the default fixture without `--model`) and the
/// drafter (a `gemma4-assistant` GGUF that pairs with the model,
/// `AssistantConfig::check_pairing`, the check the reference engine's conformance runs make),
/// and the weights of both (no NaN/±Inf, unless `--allow-nonfinite`: README "Non-finite
/// weights"). With `--build-only` the model is only looked at when `--model` or `--draft` is
/// given.
///
/// Errors: the first [`ArgError`] found, naming the flag and its value.
pub fn check_args(a: &Args) -> Result<Checked, ArgError> {
    if a.draft.is_some() {
        in_range(
            "spec-k",
            a.spec_k,
            (1, MAX_SERVER_INT),
            "draft tokens per round; the judge's engine option spec=K takes 1 or more",
        )?;
    }
    let mut port = None;
    if !a.build_only {
        in_range(
            "parallel",
            a.parallel,
            (1, suites::http::MAX_CONCURRENCY),
            "server slots; llama.cpp refuses more than 256 sequences, and the judge runs at \
             most 256 requests at once",
        )?;
        in_range(
            "ctx",
            a.ctx,
            (0, MAX_SERVER_INT),
            "context tokens, all slots together; 0: the model's trained context",
        )?;
        if a.ctx != 0 && a.ctx < a.parallel {
            return Err(ArgError::CtxBelowSlots {
                ctx: a.ctx,
                parallel: a.parallel,
            });
        }
        match a
            .port
            .map(|p| u16::try_from(p).ok().filter(|&q| q > 0).ok_or(p))
        {
            Some(Err(p)) => return Err(ArgError::PortRange(p)),
            Some(Ok(p)) => {
                // bound and released at once: the server binds it again when it starts
                TcpListener::bind(("127.0.0.1", p))
                    .map_err(|source| ArgError::PortUnavailable { port: p, source })?;
                port = Some(p);
            }
            None => {}
        }
    }
    match &a.server_bin {
        Some(bin) => suites::conformance::NotAFile::check(Some("server-bin"), bin)?,
        None => in_range("jobs", a.jobs, (1, MAX_JOBS), "compile jobs")?,
    }
    if a.build_only && a.model.is_none() && a.draft.is_none() {
        return Ok(Checked {
            model: None,
            draft: None,
            port,
        });
    }
    let model = match &a.model {
        Some(m) => m.clone(),
        None => {
            default_fixture("models/dense-target.F32.gguf").map_err(ArgError::NoDefaultModel)?
        }
    };
    let target = crate::open_gguf(Some("model"), &model)?;
    let config = Config::from_gguf(&target).map_err(|source| ArgError::NotTarget {
        path: model.clone(),
        source: Box::new(source),
    })?;
    let draft = match &a.draft {
        None => None,
        Some(d) => {
            let file = crate::open_gguf(Some("draft"), d)?;
            let assistant =
                AssistantConfig::from_gguf(&file).map_err(|source| ArgError::NotDrafter {
                    path: d.clone(),
                    source: Box::new(source),
                })?;
            assistant
                .check_pairing(&config)
                .map_err(|source| ArgError::Pairing {
                    draft: d.clone(),
                    model: model.clone(),
                    source: Box::new(source),
                })?;
            Some((d, file))
        }
    };
    // the weights last: the scan reads every block (seconds for a large model), the checks
    // above only the headers
    let load = crate::conformance::load_options(a.allow_nonfinite);
    let finite = |flag: &'static str, path: &Path, file: &GgufFile| {
        load.check(file).map_err(|first| ArgError::NonFinite {
            flag,
            path: path.to_path_buf(),
            first: Box::new(first),
        })
    };
    finite("model", &model, &target)?;
    if let Some((d, file)) = &draft {
        finite("draft", d, file)?;
    }
    let draft = draft.map(|(d, _)| (absolute(d), a.spec_k));
    Ok(Checked {
        model: Some(absolute(&model)),
        draft,
        port,
    })
}

/// The `--engine` spec that judges a server on `port` (`spec=K` for a drafting server): what the
/// verb prints in its judge command, and what `suites::http::HttpSpec::parse` takes.
pub fn judge_spec(port: u16, spec_k: Option<usize>) -> String {
    match spec_k {
        Some(k) => format!("llama-server=http://127.0.0.1:{port},spec={k}"),
        None => format!("llama-server=http://127.0.0.1:{port}"),
    }
}

/// `target/ext`.
pub fn ext_dir() -> PathBuf {
    workspace_root().join("target/ext")
}

/// The built server binary (`target/ext/llama.cpp-build/bin/llama-server`).
pub fn server_binary() -> PathBuf {
    ext_dir().join("llama.cpp-build/bin/llama-server")
}

/// The unpacked sdist's top folder (`target/ext/llama_cpp_python-VERSION`).
fn sdist_root() -> PathBuf {
    ext_dir().join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"))
}

/// The llama.cpp sources vendored in the sdist.
fn source_dir() -> PathBuf {
    sdist_root().join("vendor/llama.cpp")
}

fn run_cmd(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Resolves PyPI's (possibly relative) file URL against the JSON API URL.
fn resolve_url(base: &str, rel: &str) -> String {
    if rel.starts_with("http://") || rel.starts_with("https://") {
        return rel.to_string();
    }
    let (scheme_host, path) = match base
        .find("://")
        .and_then(|i| base[i + 3..].find('/').map(|j| i + 3 + j))
    {
        Some(k) => (&base[..k], &base[k..]),
        None => (base, "/"),
    };
    let mut segs: Vec<&str> = path.split('/').collect();
    segs.pop(); // the last segment (file name or empty after a trailing '/')
    for part in rel.split('/') {
        match part {
            ".." => {
                if segs.len() > 1 {
                    segs.pop();
                }
            }
            "." => {}
            p => segs.push(p),
        }
    }
    format!("{scheme_host}{}", segs.join("/"))
}

/// Downloads (PyPI JSON API + file URL with curl) and checks the sdist; returns its path.
fn fetch_sdist() -> Result<PathBuf> {
    let dl = ext_dir().join("dl");
    std::fs::create_dir_all(&dl)?;
    let file = dl.join(format!(
        "llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    ));
    if !file.exists() {
        let api = "https://pypi.org/pypi/llama-cpp-python/json";
        let out = Command::new("curl")
            .args(["-sSfL", api])
            .output()
            .context("curl is needed to fetch the llama-cpp-python sdist")?;
        if !out.status.success() {
            bail!("{api}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).context(api)?;
        let rel = v["releases"][LLAMA_CPP_PYTHON_VERSION]
            .as_array()
            .and_then(|files| {
                files
                    .iter()
                    .find(|f| f["packagetype"] == "sdist")
                    .and_then(|f| f["url"].as_str())
            })
            .with_context(|| {
                format!("no sdist of llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} on PyPI")
            })?;
        let url = resolve_url(api, rel);
        eprintln!("fetching {url}");
        let part = file.with_extension("part");
        run_cmd(
            Command::new("curl")
                .args(["-sSfL", "-o"])
                .arg(&part)
                .arg(&url),
        )?;
        std::fs::rename(&part, &file)?;
    }
    let sha = reference::gguf::sha256_file(&file)?;
    if sha != SDIST_SHA256 {
        bail!(
            "{}: SHA-256 {sha}, expected {SDIST_SHA256} (delete it to download again)",
            file.display()
        );
    }
    Ok(file)
}

/// The stamp written next to [`server_binary`] once `cmake --build` succeeded (it holds the
/// sdist's SHA-256): a binary without it may be the partial output of an interrupted link
/// (Ctrl-C during the build), which make would then take as up to date.
fn build_stamp() -> PathBuf {
    ext_dir().join("llama.cpp-build/bin/llama-server.built")
}

/// Builds `llama-server` unless the binary and its [`build_stamp`] (naming this sdist) exist;
/// returns its path. The sdist is unpacked into a scratch folder and renamed into place with
/// its own stamp (`.unpacked`), so an interrupted `tar` leaves no half source tree that a later
/// run would take as whole; a binary without its stamp is deleted and linked again.
pub fn build(jobs: usize) -> Result<PathBuf> {
    let bin = server_binary();
    let stamp = build_stamp();
    let stamped = |path: &Path| std::fs::read_to_string(path).is_ok_and(|s| s == SDIST_SHA256);
    if bin.exists() && stamped(&stamp) {
        eprintln!("llama-server already built: {}", bin.display());
        return Ok(bin);
    }
    let src = source_dir();
    let root = sdist_root();
    if !stamped(&root.join(".unpacked")) {
        let sdist = fetch_sdist()?;
        let scratch = ext_dir().join("unpack.part");
        for dir in [&scratch, &root] {
            if dir.exists() {
                std::fs::remove_dir_all(dir)
                    .with_context(|| format!("cannot remove {}", dir.display()))?;
            }
        }
        std::fs::create_dir_all(&scratch)?;
        run_cmd(
            Command::new("tar")
                .arg("xzf")
                .arg(&sdist)
                .arg("-C")
                .arg(&scratch),
        )?;
        let top = scratch.join(root.file_name().expect("sdist_root names a folder"));
        std::fs::write(top.join(".unpacked"), SDIST_SHA256)
            .with_context(|| format!("{}: no top folder {}", sdist.display(), top.display()))?;
        std::fs::rename(&top, &root)?;
        std::fs::remove_dir_all(&scratch)?;
    }
    let arch = std::fs::read_to_string(src.join("src/llama-arch.cpp")).unwrap_or_default();
    if !arch.contains("\"gemma4\"") {
        bail!(
            "{}: this llama.cpp does not know the gemma4 architecture",
            src.display()
        );
    }
    if Command::new("cmake").arg("--version").output().is_err() {
        bail!("cmake not found: `pip install cmake` or `apt-get install cmake`");
    }
    let build_dir = ext_dir().join("llama.cpp-build");
    // No (or another sdist's) stamp: the binary may be a partial link that make would take as
    // up to date; the stamp goes first, so an interrupted build never leaves an old stamp
    // beside a new partial binary.
    for path in [&stamp, &bin] {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove {}", path.display()));
            }
            _ => {}
        }
    }
    let t0 = Instant::now();
    run_cmd(
        Command::new("nice")
            .args(["-n", "19", "cmake", "-S"])
            .arg(&src)
            .arg("-B")
            .arg(&build_dir)
            .args([
                "-DCMAKE_BUILD_TYPE=Release",
                "-DBUILD_SHARED_LIBS=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=ON",
                "-DLLAMA_BUILD_TOOLS=ON",
                "-DLLAMA_BUILD_APP=OFF",
                "-DLLAMA_BUILD_UI=OFF",
                "-DLLAMA_USE_PREBUILT_UI=OFF",
                "-DLLAMA_OPENSSL=OFF",
                "-DGGML_NATIVE=ON",
                "-DGGML_CUDA=OFF",
            ]),
    )?;
    run_cmd(
        Command::new("nice")
            .args(["-n", "19", "cmake", "--build"])
            .arg(&build_dir)
            .args(["--target", "llama-server", "-j", &jobs.to_string()]),
    )?;
    std::fs::write(&stamp, SDIST_SHA256)
        .with_context(|| format!("cannot write {}", stamp.display()))?;
    eprintln!(
        "built {} in {:.0} s",
        bin.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(bin)
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The signals that stop the verb's server: SIGINT (Ctrl-C, `kill -INT`), SIGTERM (`kill`) and
/// SIGHUP (the terminal closed).
pub const STOP_SIGNALS: [c_int; 3] = [SIGINT, SIGTERM, SIGHUP];

/// The name of a [`STOP_SIGNALS`] signal, for messages.
pub fn signal_name(sig: c_int) -> String {
    match sig {
        SIGINT => "SIGINT".into(),
        SIGTERM => "SIGTERM".into(),
        SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

/// The last stop signal caught (0: none yet), set by the handlers [`catch_stop_signals`]
/// registers (`signal_hook::flag`: the handler only stores the number).
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicUsize>);

impl StopFlag {
    /// The signal caught, if any.
    pub fn caught(&self) -> Option<c_int> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            n => c_int::try_from(n).ok(),
        }
    }

    /// Records `sig` as caught (what the handlers do, for tests).
    #[cfg(test)]
    pub fn set(&self, sig: c_int) {
        self.0
            .store(usize::try_from(sig).unwrap_or(1), Ordering::SeqCst);
    }
}

/// Whether `sig` is ignored according to `status`, the text of `/proc/self/status` (its
/// `SigIgn:` line, a hexadecimal mask with bit `sig - 1` per signal). `None`: no such line.
pub fn ignored_in_status(status: &str, sig: c_int) -> Option<bool> {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())?;
    let bit = u32::try_from(sig).ok()?.checked_sub(1)?;
    Some(bit < 64 && mask >> bit & 1 == 1)
}

/// Whether xtask was started with `sig` ignored (`nohup` ignores SIGHUP; a shell without job
/// control ignores SIGINT in `cmd &`): read from `/proc/self/status`; `false` where it cannot be
/// read (not Linux).
fn ignored_at_start(sig: c_int) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| ignored_in_status(&s, sig))
        .unwrap_or(false)
}

/// From now on the [`STOP_SIGNALS`] no longer end xtask: they are recorded in the returned flag,
/// and the verb stops its server and then ends with the signal ([`exit_by_signal`]). A signal
/// xtask was started with ignored stays ignored (`nohup`, background jobs of a script).
///
/// Errors: a handler cannot be registered.
pub fn catch_stop_signals() -> std::io::Result<StopFlag> {
    let flag = StopFlag::default();
    for sig in STOP_SIGNALS {
        if ignored_at_start(sig) {
            continue;
        }
        let value = usize::try_from(sig).unwrap_or(1);
        signal_hook::flag::register_usize(sig, Arc::clone(&flag.0), value)?;
    }
    Ok(flag)
}

/// Ends xtask as `sig` would have without a handler (a shell shows status 128 + sig: 130 for
/// SIGINT), after the server was stopped; `exit(128 + sig)` if that cannot be done.
pub fn exit_by_signal(sig: c_int) -> ! {
    let _ = signal_hook::low_level::emulate_default_handler(sig);
    std::process::exit(128 + sig)
}

/// The server process: killed and reaped when dropped — on every error path, a panic, or a stop
/// signal — unless [`ServerGuard::release`]d (`--detach`, once it answers).
#[derive(Debug)]
pub struct ServerGuard(Option<Child>);

impl ServerGuard {
    /// Guards `child`.
    pub fn new(child: Child) -> ServerGuard {
        ServerGuard(Some(child))
    }

    /// The process.
    pub fn child(&mut self) -> &mut Child {
        self.0
            .as_mut()
            .expect("a ServerGuard holds its child until released")
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// Lets the process outlive xtask (not killed on drop, never waited for: `--detach`).
    pub fn release(mut self) {
        // dropping a Child neither kills nor waits for it
        drop(self.0.take());
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            // an error here means it already exited: nothing left to stop
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Why the server did not come up ([`wait_healthy`]).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The process ended before answering.
    #[error("llama-server exited ({status}) before answering on port {port}")]
    Exited {
        /// Its exit status.
        status: ExitStatus,
        /// The port it was given.
        port: u16,
    },
    /// No healthy answer within the limit.
    #[error("llama-server on port {port} not healthy after {limit:?}")]
    Timeout {
        /// The port.
        port: u16,
        /// The wait.
        limit: Duration,
    },
    /// A stop signal arrived while waiting.
    #[error("stopped by {} while llama-server was starting", signal_name(*.0))]
    Stopped(c_int),
    /// The process could not be polled.
    #[error("cannot poll llama-server: {0}")]
    Poll(#[from] std::io::Error),
}

/// Polls `GET /health` of the server `child` on `port` until HTTP 200, `limit`, the child's exit
/// (e.g. a model it cannot load) or a stop signal in `stop`, whichever comes first.
///
/// Errors: [`StartError`]: the child exited (with its status), `limit` passed without a healthy
/// answer, or a signal was caught.
pub fn wait_healthy(
    port: u16,
    limit: Duration,
    child: &mut Child,
    stop: &StopFlag,
) -> Result<(), StartError> {
    let t0 = Instant::now();
    let url = format!("http://127.0.0.1:{port}/health");
    loop {
        if let Some(sig) = stop.caught() {
            return Err(StartError::Stopped(sig));
        }
        if let Some(status) = child.try_wait()? {
            return Err(StartError::Exited { status, port });
        }
        if t0.elapsed() >= limit {
            return Err(StartError::Timeout { port, limit });
        }
        let ok = Command::new("curl")
            .args(["-sf", "--max-time", "5", "-o", "/dev/null", &url])
            .stdin(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// How a foreground server ended ([`serve_foreground`]).
#[derive(Debug)]
pub enum Ended {
    /// A stop signal arrived; the server was stopped (killed and reaped).
    Signal(c_int),
    /// The server exited by itself.
    Exited(ExitStatus),
}

/// Waits on the foreground server until it exits or a stop signal is caught; on a signal the
/// server is killed and reaped before this returns (the guard is dropped).
///
/// Errors: the process cannot be polled (the guard then stops it).
pub fn serve_foreground(mut server: ServerGuard, stop: &StopFlag) -> std::io::Result<Ended> {
    loop {
        if let Some(sig) = stop.caught() {
            drop(server);
            return Ok(Ended::Signal(sig));
        }
        if let Some(status) = server.child().try_wait()? {
            // Ctrl-C in the terminal reaches the server too: it may end first
            return Ok(match stop.caught() {
                Some(sig) => Ended::Signal(sig),
                None => Ended::Exited(status),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether process `pid` runs: `/proc/PID/stat` exists (a reaped process leaves none) and its
/// state is not zombie. A pid reused by another process counts as running (its file is kept:
/// never a live server's file removed).
fn process_runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // "PID (COMM) STATE …": the state follows the last ')'
        stat.rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            != Some("Z")
    })
}

/// Removes the pid files `llama-server-PORT.pid` in `dir` (written by `--detach`) whose server
/// no longer runs — stopped with `kill`, killed, or gone with a reboot: nothing removes the file
/// then — or that hold no pid; one note per file removed, naming it and why. A file whose pid
/// runs is kept, and so is one that cannot be read (with a note), and every other file. Nothing is done where `/proc` cannot tell whether a
/// process runs (not Linux).
pub fn sweep_stale_pid_files(dir: &Path) -> Vec<String> {
    if !Path::new("/proc/self/stat").exists() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("llama-server-")?.strip_suffix(".pid"))
                .is_some_and(|port| port.parse::<u16>().is_ok())
                && p.is_file()
        })
        .collect();
    paths.sort();
    let mut notes = Vec::new();
    for p in paths {
        // a file that cannot be read may hold a live pid: kept, with a note
        let text = match std::fs::read(&p) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                notes.push(format!(
                    "the pid file {} cannot be read ({e}): kept",
                    p.display()
                ));
                continue;
            }
        };
        let why = match text.trim().parse::<u32>() {
            Ok(pid) if process_runs(pid) => continue,
            Ok(pid) => format!("pid {pid} no longer runs: its server was stopped or killed"),
            Err(_) => format!("it holds no pid: {:?}", text.trim()),
        };
        match std::fs::remove_file(&p) {
            Ok(()) => notes.push(format!(
                "removed the stale pid file {} ({why})",
                p.display()
            )),
            Err(e) => notes.push(format!(
                "the stale pid file {} ({why}) cannot be removed: {e}",
                p.display()
            )),
        }
    }
    notes
}

/// Makes `path` (a log or pid file under `target/ext/` this start is about to write) safe to
/// write: a symlink there is removed, not followed (a note says so); a plain pid file that holds
/// a pid is replaced, with a note naming that pid (this start's port is free, so it serves
/// nothing of ours); a folder, FIFO, socket or device there is an error naming it — writing
/// would fail or block.
/// `Ok(None)` when there is nothing to say.
fn own_file(path: &Path) -> Result<Option<String>> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(None);
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        std::fs::remove_file(path).with_context(|| path.display().to_string())?;
        return Ok(Some(format!(
            "removed the symlink {} (a file this start writes; not followed)",
            path.display()
        )));
    }
    if !ft.is_file() {
        bail!(
            "{}: not a regular file ({}); remove it, then start again",
            path.display(),
            if ft.is_dir() {
                "a folder"
            } else {
                "a FIFO, socket or device"
            }
        );
    }
    let held = std::fs::read(path).ok().and_then(|b| {
        std::str::from_utf8(&b)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
    });
    Ok(match held {
        Some(pid) if path.extension().is_some_and(|e| e == "pid") => Some(format!(
            "replacing the pid file {} (it held pid {pid}, which does not serve this port: the \
             port is free)",
            path.display()
        )),
        _ => None,
    })
}

/// The last `n` lines of the log at `path` (empty when unreadable).
fn log_tail(path: &Path, n: usize) -> String {
    let lines: Vec<String> = std::fs::File::open(path)
        .map(|f| BufReader::new(f).lines().map_while(Result::ok).collect())
        .unwrap_or_default();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs the verb: every argument checked ([`check_args`]), then the build, then the server.
pub fn run(a: &Args) -> Result<()> {
    let checked = check_args(a)?;
    let bin = match &a.server_bin {
        Some(b) => absolute(b),
        None => build(a.jobs)?,
    };
    if a.build_only {
        println!("{}", bin.display());
        return Ok(());
    }
    let Some(model) = checked.model else {
        bail!("no model to serve");
    };
    let draft = checked.draft;
    let port = match checked.port {
        Some(p) => p,
        None => free_port()?,
    };
    let mut cmd = suites::http::llama_server_command(
        &bin,
        &model,
        draft.as_ref().map(|(d, k)| (d.as_path(), *k)),
        port,
        a.parallel,
        a.ctx,
    );
    cmd.args(&a.extra);
    let spec = judge_spec(port, draft.as_ref().map(|d| d.1));
    // pid files of servers that no longer run (killed without xtask) are not trusted: removed
    for note in sweep_stale_pid_files(&ext_dir()) {
        println!("note: {note}");
    }
    std::fs::create_dir_all(ext_dir())?;
    let log = ext_dir().join(format!("llama-server-{port}.log"));
    let pid_file = ext_dir().join(format!("llama-server-{port}.pid"));
    // before the spawn: the files this start writes are plain files of ours (a symlink is not
    // followed, a FIFO or folder in their place stops it here, not after the server started)
    for path in [&log].into_iter().chain(a.detach.then_some(&pid_file)) {
        if let Some(note) = own_file(path)? {
            println!("note: {note}");
        }
    }
    let logf = std::fs::File::create(&log).with_context(|| log.display().to_string())?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(logf.try_clone()?))
        .stderr(Stdio::from(logf));
    // before the spawn: a signal from now on stops the server instead of orphaning it
    let stop = catch_stop_signals().context("cannot catch SIGINT/SIGTERM/SIGHUP")?;
    let mut server = ServerGuard::new(
        cmd.spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?,
    );
    if let Err(e) = wait_healthy(port, Duration::from_secs(180), server.child(), &stop) {
        drop(server);
        if let StartError::Stopped(sig) = e {
            eprintln!("{e}: stopped it");
            exit_by_signal(sig);
        }
        bail!("{e}\n{}", log_tail(&log, 20));
    }
    let pid = server.id();
    println!(
        "llama-server (pid {pid}) serving {} on http://127.0.0.1:{port} (log {})",
        model.display(),
        log.display()
    );
    let label = if draft.is_some() { "mtp" } else { "plain" };
    println!(
        "judge it: cargo xtask conformance --engine {spec} --model {} --label {label}",
        model.display()
    );
    if a.detach {
        std::fs::write(&pid_file, pid.to_string())
            .with_context(|| pid_file.display().to_string())?;
        server.release();
        println!("stop it: kill {pid} (pid also in {})", pid_file.display());
        return Ok(());
    }
    println!("stop it: Ctrl-C (judge from another terminal, or start with --detach)");
    match serve_foreground(server, &stop)? {
        Ended::Signal(sig) => {
            eprintln!("{}: stopped llama-server (pid {pid})", signal_name(sig));
            exit_by_signal(sig)
        }
        Ended::Exited(status) => bail!("llama-server exited: {status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{
        free_port, judge_spec, own_file, process_runs, resolve_url, serve_foreground,
        sweep_stale_pid_files, wait_healthy, Ended, ServerGuard, StartError, StopFlag, SIGINT,
        SIGTERM,
    };
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    /// The sweep removes a pid file whose process is gone (a killed detached server) or that
    /// holds no pid, with a note naming it; a file whose process runs and files that are not
    /// pid files of ours stay.
    #[test]
    fn stale_pid_files_are_removed_with_a_note() {
        let dir = std::env::temp_dir().join(format!("llama-pid-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // a process that ran and was reaped: its pid no longer runs
        let mut gone = Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let dead = gone.id();
        let live = std::process::id();
        let file = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let stale = file("llama-server-40001.pid", dead.to_string());
        let running = file("llama-server-40002.pid", live.to_string());
        let garbage = file("llama-server-40003.pid", "x\n".into());
        let other = file("llama-server-40004.log", dead.to_string());
        let foreign = file("other-40005.pid", dead.to_string());
        assert_eq!(
            sweep_stale_pid_files(&dir),
            [
                format!(
                    "removed the stale pid file {} (pid {dead} no longer runs: its server was \
                     stopped or killed)",
                    stale.display()
                ),
                format!(
                    "removed the stale pid file {} (it holds no pid: \"x\")",
                    garbage.display()
                ),
            ]
        );
        assert!(!stale.exists() && !garbage.exists());
        assert!(running.exists() && other.exists() && foreign.exists());
        // nothing left to remove
        assert!(sweep_stale_pid_files(&dir).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The log and pid files a start writes: nothing there, or a plain file, is fine (a pid in
    /// a pid file is named); a symlink is removed, its target untouched; a folder or a FIFO is
    /// an error naming the path before anything starts (writing would fail, or block for ever).
    #[test]
    fn files_a_start_writes_are_plain_files_of_ours() {
        let dir = std::env::temp_dir().join(format!("llama-own-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("llama-server-40100.log");
        assert!(own_file(&missing).unwrap().is_none());
        let log = dir.join("llama-server-40101.log");
        std::fs::write(&log, "12\n").unwrap();
        assert!(own_file(&log).unwrap().is_none());
        let pid = dir.join("llama-server-40101.pid");
        std::fs::write(&pid, "12\n").unwrap();
        assert_eq!(
            own_file(&pid).unwrap().unwrap(),
            format!(
                "replacing the pid file {} (it held pid 12, which does not serve this port: the \
                 port is free)",
                pid.display()
            )
        );
        let target = dir.join("users-file");
        std::fs::write(&target, "1").unwrap();
        let link = dir.join("llama-server-40102.pid");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(
            own_file(&link).unwrap().unwrap(),
            format!(
                "removed the symlink {} (a file this start writes; not followed)",
                link.display()
            )
        );
        assert!(std::fs::symlink_metadata(&link).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "1");
        let folder = dir.join("llama-server-40103.log");
        std::fs::create_dir(&folder).unwrap();
        assert_eq!(
            own_file(&folder).unwrap_err().to_string(),
            format!(
                "{}: not a regular file (a folder); remove it, then start again",
                folder.display()
            )
        );
        let fifo = dir.join("llama-server-40104.pid");
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        assert_eq!(
            own_file(&fifo).unwrap_err().to_string(),
            format!(
                "{}: not a regular file (a FIFO, socket or device); remove it, then start again",
                fifo.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A child that runs until killed (`sleep 600`).
    fn sleeper() -> Child {
        Command::new("sleep").arg("600").spawn().unwrap()
    }

    /// Whether process `pid` runs (the sweep's [`process_runs`]: a zombie does not — a released
    /// child killed here is never reaped by this process).
    fn alive(pid: u32) -> bool {
        process_runs(pid)
    }

    /// A server that dies at start (here a shell exiting with status 3, nothing listening) is
    /// reported at once with its status, not after the whole wait (the `--model` of a truncated
    /// GGUF made `xtask llama-server` silent for 180 s).
    #[test]
    fn wait_healthy_stops_when_the_server_exits() {
        let port = free_port().unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let err = wait_healthy(
            port,
            Duration::from_secs(60),
            &mut child,
            &StopFlag::default(),
        )
        .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
        let msg = err.to_string();
        assert!(msg.contains("exited") && msg.contains('3'), "{msg}");
    }

    /// A stop signal caught while the server starts ends the wait at once, naming the signal
    /// (the caller then drops the guard, which stops the server).
    #[test]
    fn wait_healthy_stops_on_a_stop_signal() {
        let port = free_port().unwrap();
        let mut server = ServerGuard::new(sleeper());
        let stop = StopFlag::default();
        stop.set(SIGTERM);
        let t0 = Instant::now();
        let err = wait_healthy(port, Duration::from_secs(60), server.child(), &stop).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(
            matches!(err, StartError::Stopped(s) if s == SIGTERM),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "stopped by SIGTERM while llama-server was starting"
        );
    }

    /// Dropping the guard (any error path, a panic) kills and reaps the server; a released one
    /// keeps running (`--detach`).
    #[test]
    fn the_guard_stops_its_server_unless_released() {
        let server = ServerGuard::new(sleeper());
        let pid = server.id();
        assert!(alive(pid));
        drop(server);
        assert!(!alive(pid), "pid {pid} survived its guard");

        let server = ServerGuard::new(sleeper());
        let pid = server.id();
        server.release();
        assert!(alive(pid), "a released server was stopped");
        let killed = Command::new("kill").arg(pid.to_string()).status().unwrap();
        assert!(killed.success());
    }

    /// In the foreground, a caught signal stops the server before the verb ends (a SIGINT sent
    /// to xtask alone left llama-server running, reparented to init); a server that exits by
    /// itself is reported with its status.
    #[test]
    fn the_foreground_server_is_stopped_on_a_signal() {
        let server = ServerGuard::new(sleeper());
        let pid = server.id();
        let stop = StopFlag::default();
        let flag = stop.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            flag.set(SIGINT);
        });
        let ended = serve_foreground(server, &stop).unwrap();
        t.join().unwrap();
        assert!(
            matches!(ended, Ended::Signal(s) if s == SIGINT),
            "{ended:?}"
        );
        assert!(!alive(pid), "pid {pid} survived the signal");

        let child = Command::new("sh").args(["-c", "exit 4"]).spawn().unwrap();
        let ended = serve_foreground(ServerGuard::new(child), &StopFlag::default()).unwrap();
        assert!(
            matches!(&ended, Ended::Exited(s) if s.code() == Some(4)),
            "{ended:?}"
        );
    }

    /// The `SigIgn` mask of `/proc/self/status`: bit `sig - 1` (SIGHUP 1 → bit 0, SIGINT 2 →
    /// bit 1, SIGTERM 15 → bit 14); the mask `0x4003` ignores all three, `0x2` SIGINT alone.
    #[test]
    fn ignored_signals_are_read_from_the_status_mask() {
        use super::{ignored_in_status, SIGHUP};
        let status =
            |mask: &str| format!("Name:\txtask\nSigBlk:\t0000000000000000\nSigIgn:\t{mask}\n");
        let all = status("0000000000004003");
        for sig in [SIGHUP, SIGINT, SIGTERM] {
            assert_eq!(ignored_in_status(&all, sig), Some(true), "{sig}");
        }
        let int_only = status("0000000000000002");
        assert_eq!(ignored_in_status(&int_only, SIGINT), Some(true));
        assert_eq!(ignored_in_status(&int_only, SIGHUP), Some(false));
        assert_eq!(ignored_in_status(&int_only, SIGTERM), Some(false));
        assert_eq!(ignored_in_status("Name:\txtask\n", SIGINT), None);
        // Linux has the line
        let own = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(ignored_in_status(&own, SIGTERM).is_some());
    }

    /// The judge command's engine spec is one conformance takes (`spec=K` with K ≥ 1; the verb
    /// refuses `--spec-k 0` before this, which printed `spec=0`, refused by conformance).
    #[test]
    fn the_judge_spec_parses() {
        for k in [None, Some(1), Some(4)] {
            let spec = judge_spec(8080, k);
            let parsed = suites::http::HttpSpec::parse(&spec).unwrap();
            assert_eq!(parsed.spec_k, k, "{spec}");
            assert_eq!(parsed.url, "http://127.0.0.1:8080", "{spec}");
        }
        assert!(suites::http::HttpSpec::parse(&judge_spec(8080, Some(0))).is_err());
    }

    #[test]
    fn pypi_relative_urls() {
        let api = "https://pypi.org/pypi/llama-cpp-python/json";
        assert_eq!(
            resolve_url(api, "../../packages/packages/ec/e9/x.tar.gz"),
            "https://pypi.org/packages/packages/ec/e9/x.tar.gz"
        );
        assert_eq!(
            resolve_url(api, "https://files.pythonhosted.org/a.tar.gz"),
            "https://files.pythonhosted.org/a.tar.gz"
        );
    }
}

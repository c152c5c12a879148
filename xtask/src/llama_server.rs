//! `cargo xtask llama-server`: builds llama.cpp's `llama-server` (CPU) from the llama.cpp sources
//! vendored in the `llama-cpp-python` source distribution on PyPI (pinned version and SHA-256),
//! under `target/ext/`, and starts it on a free loopback port, ready for
//! `cargo xtask conformance --engine llama-server=http://127.0.0.1:PORT` (`suites::http`).
//!
//! Layout: `target/ext/dl/<sdist>.tar.gz`, `target/ext/llama_cpp_python-<v>/vendor/llama.cpp`
//! (sources), `target/ext/llama.cpp-build/bin/llama-server` (binary, [`server_binary`]).
//! Only the server target is built (`LLAMA_BUILD_TESTS/EXAMPLES=OFF`, `--target
//! llama-server`), at `nice -n 19`.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::conformance::{default_fixture, workspace_root};

/// The pinned `llama-cpp-python` release: its vendored llama.cpp (ggml 0.25.3) knows the
/// `gemma4` and `gemma4-assistant` architectures (`src/llama-arch.cpp`) and MTP drafting
/// (`--spec-type draft-mtp`).
pub const LLAMA_CPP_PYTHON_VERSION: &str = "0.3.36";
/// SHA-256 of `llama_cpp_python-0.3.36.tar.gz` as published on PyPI.
pub const SDIST_SHA256: &str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e";

/// Flags of `llama-server`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only build (or check) the binary; do not start a server.
    #[arg(long)]
    pub build_only: bool,
    /// Model GGUF to serve (default: $GEMMA4_FIXTURES/models/dense-target.F32.gguf).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// MTP drafter GGUF (gemma4-assistant): serve with --spec-type draft-mtp.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Draft tokens per round with --draft (the engine spec then needs `spec=K`).
    #[arg(long, default_value_t = 4)]
    pub spec_k: usize,
    /// Port on 127.0.0.1 (default: a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Server slots (parallel sequences; `batch:N` needs N ≤ slots).
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Context size (all slots together).
    #[arg(long, default_value_t = 8192)]
    pub ctx: usize,
    /// Compile jobs.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Start the server in the background (pid and log under target/ext/) and return.
    #[arg(long)]
    pub detach: bool,
    /// Extra arguments for llama-server (after `--`).
    #[arg(last = true)]
    pub extra: Vec<String>,
}

/// `target/ext`.
pub fn ext_dir() -> PathBuf {
    workspace_root().join("target/ext")
}

/// The built server binary (`target/ext/llama.cpp-build/bin/llama-server`).
pub fn server_binary() -> PathBuf {
    ext_dir().join("llama.cpp-build/bin/llama-server")
}

fn source_dir() -> PathBuf {
    ext_dir()
        .join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"))
        .join("vendor/llama.cpp")
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

/// Builds `llama-server` unless the binary exists; returns its path.
pub fn build(jobs: usize) -> Result<PathBuf> {
    let bin = server_binary();
    if bin.exists() {
        eprintln!("llama-server already built: {}", bin.display());
        return Ok(bin);
    }
    let src = source_dir();
    if !src.join("CMakeLists.txt").exists() {
        let sdist = fetch_sdist()?;
        run_cmd(
            Command::new("tar")
                .arg("xzf")
                .arg(&sdist)
                .arg("-C")
                .arg(ext_dir()),
        )?;
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

/// Polls `GET /health` of the server `child` on `port` until HTTP 200, `limit`, or the child's
/// exit (e.g. a model it cannot load), whichever comes first.
///
/// Errors: the child exited (with its status) or `limit` passed without a healthy answer.
pub fn wait_healthy(port: u16, limit: Duration, child: &mut Child) -> Result<()> {
    let t0 = Instant::now();
    let url = format!("http://127.0.0.1:{port}/health");
    while t0.elapsed() < limit {
        if let Some(status) = child.try_wait()? {
            bail!("llama-server exited ({status}) before answering on port {port}");
        }
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", &url])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    bail!("llama-server on port {port} not healthy after {limit:?}")
}

/// Runs the verb.
pub fn run(a: &Args) -> Result<()> {
    let bin = build(a.jobs)?;
    if a.build_only {
        println!("{}", bin.display());
        return Ok(());
    }
    let model = match &a.model {
        Some(m) => m.clone(),
        None => default_fixture("models/dense-target.F32.gguf").map_err(anyhow::Error::msg)?,
    };
    if !model.exists() {
        bail!("model not found: {}", model.display());
    }
    // absolute, without `..`: the printed command works from any folder
    let model = model.canonicalize().unwrap_or(model);
    let draft = a
        .draft
        .as_ref()
        .map(|d| d.canonicalize().unwrap_or(d.clone()));
    let port = match a.port {
        Some(p) => p,
        None => free_port()?,
    };
    let mut cmd = suites::http::llama_server_command(
        &bin,
        &model,
        draft.as_deref().map(|d| (d, a.spec_k)),
        port,
        a.parallel,
        a.ctx,
    );
    cmd.args(&a.extra);
    let spec = match &draft {
        Some(_) => format!("llama-server=http://127.0.0.1:{port},spec={}", a.spec_k),
        None => format!("llama-server=http://127.0.0.1:{port}"),
    };
    let log = ext_dir().join(format!("llama-server-{port}.log"));
    let logf = std::fs::File::create(&log)?;
    cmd.stdout(Stdio::from(logf.try_clone()?))
        .stderr(Stdio::from(logf));
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    if let Err(e) = wait_healthy(port, Duration::from_secs(180), &mut child) {
        let _ = child.kill();
        let tail: Vec<String> = BufReader::new(std::fs::File::open(&log)?)
            .lines()
            .map_while(Result::ok)
            .collect();
        bail!("{e}\n{}", tail[tail.len().saturating_sub(20)..].join("\n"));
    }
    println!(
        "llama-server (pid {}) serving {} on http://127.0.0.1:{port} (log {})",
        child.id(),
        model.display(),
        log.display()
    );
    let label = if draft.is_some() { "mtp" } else { "plain" };
    println!(
        "judge it: cargo xtask conformance --engine {spec} --model {} --label {label}",
        model.display()
    );
    if a.detach {
        let pid_file = ext_dir().join(format!("llama-server-{port}.pid"));
        std::fs::write(&pid_file, child.id().to_string())?;
        println!(
            "stop it: kill {} (pid also in {})",
            child.id(),
            pid_file.display()
        );
        return Ok(());
    }
    println!("stop it: Ctrl-C (judge from another terminal, or start with --detach)");
    let status = child.wait()?;
    bail!("llama-server exited: {status}")
}

#[cfg(test)]
mod tests {
    use super::{free_port, resolve_url, wait_healthy};
    use std::time::{Duration, Instant};

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
        let err = wait_healthy(port, Duration::from_secs(60), &mut child).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
        let msg = err.to_string();
        assert!(msg.contains("exited") && msg.contains('3'), "{msg}");
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

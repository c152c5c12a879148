//! `cargo xtask llama-server` through the built binary: every argument is checked before
//! anything is built or started (one `error: …` line, exit 2, nothing else printed), and the
//! server it starts is stopped when xtask is stopped.
//!
//! No llama.cpp build is needed: the refusals come before the build, and the server tests run
//! a stand-in (`--server-bin`, a shell script that starts this test binary's
//! [`fake_llama_server`], which answers `GET /health`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The workspace root (the folder above `xtask/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `$GEMMA4_FIXTURES/models/NAME`, or `None` (after printing the skip) without the fixtures.
fn fixture(name: &str) -> Option<PathBuf> {
    let fx = reference::fixtures_dir();
    let p = fx.join("models").join(name);
    if p.exists() {
        Some(p)
    } else {
        println!("skipped: fixtures not found at {}", fx.display());
        None
    }
}

/// Runs `cargo xtask llama-server ARGS`: (exit status, stdout, stderr, seconds).
fn llama_server(args: &[&str]) -> (Option<i32>, String, String, f64) {
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("llama-server")
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t0.elapsed().as_secs_f64(),
    )
}

/// Asserts a refusal: exit 2, nothing on stdout, exactly `error: {expected}` on stderr (no
/// build or fetch line before it), within seconds.
fn assert_refused(args: &[&str], expected: &str) {
    let (code, stdout, stderr, secs) = llama_server(args);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (Some(2), "", format!("error: {expected}\n").as_str()),
        "{args:?}"
    );
    assert!(secs < 60.0, "{args:?}: {secs} s");
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A missing model is refused before the build (it built llama.cpp for 472 s first).
#[test]
fn a_missing_model_is_refused_before_the_build() {
    assert_refused(
        &["--model", "/nonexistent.gguf"],
        "--model /nonexistent.gguf: no such file",
    );
    assert_refused(
        &["--build-only", "--model", "/nonexistent.gguf"],
        "--model /nonexistent.gguf: no such file",
    );
    // a folder is no model file either
    assert_refused(&["--model", "/"], "--model /: is a directory, not a file");
}

/// The counts: `--spec-k 0` (it started the server with `--spec-draft-n-max 0` and printed a
/// judge command with `spec=0`, which conformance refuses), `--parallel 0`, a context smaller
/// than the slots (but `--ctx 0`, the model's own, is taken), `--jobs 0`, `--port 0`, and values
/// beyond a C int. Checked before the model
/// (which does not exist here), so each names its flag.
#[test]
fn counts_out_of_range_are_refused() {
    let no = "/nonexistent/llama-server-args.gguf";
    let cases: [(&[&str], &str); 10] = [
        (
            &["--spec-k", "0", "--draft", no, "--model", no],
            "--spec-k 0: must be in 1..=2147483647 (draft tokens per round; the judge's engine \
             option spec=K takes 1 or more)",
        ),
        (
            &["--spec-k", "2147483648", "--draft", no, "--model", no],
            "--spec-k 2147483648: must be in 1..=2147483647 (draft tokens per round; the judge's \
             engine option spec=K takes 1 or more)",
        ),
        (
            &["--parallel", "0", "--model", no],
            "--parallel 0: must be in 1..=256 (server slots; llama.cpp refuses more than 256 \
             sequences, and the judge runs at most 256 requests at once)",
        ),
        (
            // llama-server itself exits with 'n_seq_max must be <= 256' after starting
            &["--parallel", "257", "--model", no],
            "--parallel 257: must be in 1..=256 (server slots; llama.cpp refuses more than 256 \
             sequences, and the judge runs at most 256 requests at once)",
        ),
        (
            &["--ctx", "2147483648", "--model", no],
            "--ctx 2147483648: must be in 0..=2147483647 (context tokens, all slots together; \
             0: the model's trained context)",
        ),
        (
            &["--ctx", "3", "--parallel", "4", "--model", no],
            "--ctx 3 is smaller than --parallel 4: each of the 4 slots gets ctx / parallel \
             tokens, which would be 0",
        ),
        (
            &["--jobs", "0", "--model", no],
            "--jobs 0: must be in 1..=1024 (compile jobs)",
        ),
        (
            &["--port", "0", "--model", no],
            "--port 0: give a port from 1 to 65535, or leave --port out for a free one",
        ),
        // clap's own u16 message said "not in 0..=65535", and 0 is refused
        (
            &["--port", "70000", "--model", no],
            "--port 70000: give a port from 1 to 65535, or leave --port out for a free one",
        ),
        (
            &["--server-bin", "/nonexistent/llama-server", "--model", no],
            "--server-bin /nonexistent/llama-server: no such file",
        ),
    ];
    for (args, expected) in cases {
        assert_refused(args, expected);
    }
    // `--ctx 0` is llama-server's "the model's trained context" (`-c 0`): it passes the counts
    // (with more slots than 0) and the run stops on the missing model instead
    assert_refused(
        &["--ctx", "0", "--parallel", "4", "--model", no],
        &format!("--model {no}: no such file"),
    );
}

/// A port that is taken is refused naming it (the server would fail to bind after the build).
#[test]
fn a_taken_port_is_refused() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let (code, stdout, stderr, _) = llama_server(&["--port", &port, "--model", "/nonexistent"]);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: --port {port}: cannot listen on 127.0.0.1:{port}: "
        )) && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// `--spec-k` without `--draft`, and `--build-only` with a flag that only a started server
/// uses, are usage errors (they were ignored).
#[test]
fn flags_without_effect_are_refused() {
    for args in [
        &["--spec-k", "2"][..],
        &["--build-only", "--detach"][..],
        &["--build-only", "--port", "8080"][..],
    ] {
        let (code, stdout, stderr, _) = llama_server(args);
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
}

/// The model must be a Gemma-4 target and the drafter an MTP assistant that pairs with it,
/// `--build-only` included (a target given as `--draft` with `--build-only` exited 0).
#[test]
fn model_and_drafter_kinds_are_checked() {
    let (Some(target), Some(assistant), Some(other)) = (
        fixture("dense-target.F32.gguf"),
        fixture("dense-assistant.F32.gguf"),
        fixture("e2b-assistant.Q8_0.gguf"),
    ) else {
        return;
    };
    let (t, a, o) = (s(&target), s(&assistant), s(&other));
    for build_only in [false, true] {
        let with = |args: &[&str]| {
            let mut v: Vec<String> = args.iter().map(|x| x.to_string()).collect();
            if build_only {
                v.insert(0, "--build-only".into());
            }
            v
        };
        let run = |args: Vec<String>| {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            llama_server(&refs)
        };
        // a target as the drafter
        let (code, stdout, stderr, _) = run(with(&["--model", t, "--draft", t]));
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "error: --draft {t}: not an MTP drafter (gemma4-assistant): \
                 general.architecture is 'gemma4', expected 'gemma4-assistant'\n"
            )
        );
        // an assistant as the model
        let (code, _, stderr, _) = run(with(&["--model", a]));
        assert_eq!(code, Some(2), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "error: --model {a}: not a Gemma-4 target model (gemma4): \
                 general.architecture is 'gemma4-assistant', expected 'gemma4'\n"
            )
        );
        // another target's assistant
        let (code, _, stderr, _) = run(with(&["--model", t, "--draft", o]));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.starts_with(&format!(
                "error: --draft {o} does not pair with --model {t}: "
            )) && stderr.lines().count() == 1,
            "{stderr}"
        );
        // not a GGUF at all
        let (code, _, stderr, _) = run(with(&["--model", t, "--draft", "/etc/hostname"]));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.starts_with("error: --draft /etc/hostname: ") && stderr.lines().count() == 1,
            "{stderr}"
        );
    }
}

/// The stand-in llama-server: when started by the script of [`fake_server_bin`] (which sets
/// `FAKE_LLAMA_SERVER_PORT`), answers every connection on that port with `200 OK`, until
/// killed. Run alone (no variable) it returns at once.
#[test]
#[ignore = "the stand-in llama-server that the server tests start; does nothing alone"]
fn fake_llama_server() {
    let Ok(port) = std::env::var("FAKE_LLAMA_SERVER_PORT") else {
        return;
    };
    let listener = TcpListener::bind(format!("127.0.0.1:{port}")).unwrap();
    for conn in listener.incoming() {
        let Ok(mut c) = conn else { continue };
        let mut buf = [0u8; 1024];
        let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = c.read(&mut buf);
        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    }
}

/// A loopback port free when asked (the listener is dropped at once), as text for `--port`.
fn free_port() -> String {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string()
}

/// A folder for one test under the test target's scratch space.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("llama-server-args-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An executable script in `dir` standing in for llama-server: it writes its pid to
/// `dir/server.pid`, then becomes [`fake_llama_server`] on the `--port` it was given, or with
/// `healthy = false` a process that never answers (`sleep`).
fn fake_server_bin(dir: &Path, healthy: bool) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let serve = if healthy {
        format!(
            "FAKE_LLAMA_SERVER_PORT=$port exec '{}' --exact fake_llama_server --ignored \
             --test-threads 1",
            exe.display()
        )
    } else {
        "exec sleep 600".to_string()
    };
    let script = format!(
        "#!/bin/sh\nport=\nwhile [ $# -gt 0 ]; do\n  if [ \"$1\" = --port ]; then port=$2; fi\n  \
         shift\ndone\necho $$ > '{}'\n{serve}\n",
        dir.join("server.pid").display()
    );
    let bin = dir.join("llama-server");
    std::fs::write(&bin, script).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Whether process `pid` runs: one of its threads (`/proc/PID/task/TID`) exists and is not a
/// zombie (a detached server killed by the test is reaped by init, which in a container may
/// never happen). The leader's state alone is not enough: a killed stand-in's leader is a
/// zombie while its test thread is still exiting with the listening socket open, and the next
/// start on that port was refused (`a_stale_pid_file_is_replaced_with_a_note`: `--port P:
/// cannot listen on 127.0.0.1:P: Address already in use`).
fn alive(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| {
        tasks.filter_map(Result::ok).any(|task| {
            std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                // "TID (COMM) STATE …": the state follows the last ')'
                stat.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next())
                    != Some("Z")
            })
        })
    })
}

/// Waits up to 60 s for `f` to be true.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(60), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `sig` (`INT`, `TERM`) to `pid` with kill(1).
fn kill(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// Makes the children this test process starts begin with SIGINT at its default action, also
/// when this process was started with SIGINT ignored (a shell's `cmd &` without job control, as
/// a CI script run in the background does): an ignored signal stays ignored across exec, and
/// xtask rightly keeps it ignored, so `kill -INT` would do nothing and the SIGINT tests would
/// wait for ever. A caught signal is reset to its default by exec, so a handler that only sets a
/// flag is installed here (once, and only when SIGINT is ignored: an interactive run keeps its
/// Ctrl-C).
fn children_get_default_sigint() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let ignored = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| status_ignores_sigint(&s))
            .unwrap_or(false);
        if ignored {
            let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            signal_hook::flag::register(signal_hook::consts::SIGINT, flag)
                .expect("a SIGINT handler in the test process");
        }
    });
}

/// Whether the `SigIgn:` mask of a `/proc/PID/status` text has SIGINT (bit 1) set.
fn status_ignores_sigint(status: &str) -> Option<bool> {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())?;
    Some(mask >> 1 & 1 == 1)
}

/// Waits up to 60 s for `child` to end; kills it and fails the test after that (a signal that
/// did not stop xtask must fail the test, not hang the test run).
fn wait_bounded(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out after 60 s: {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Serialises the tests that start a server: every start sweeps `target/ext/` of the stale pid
/// files of every port, so a start in one test may remove (with its note) the pid file of a
/// server another test has just stopped — `a_stale_pid_file_is_replaced_with_a_note` then saw no
/// note in CI (the file was gone before its second start).
fn servers_one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts `cargo xtask llama-server --server-bin BIN --model MODEL EXTRA…` with piped output
/// and SIGINT at its default action ([`children_get_default_sigint`]).
fn start(bin: &Path, model: &Path, extra: &[&str]) -> Child {
    children_get_default_sigint();
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["llama-server", "--server-bin", s(bin), "--model", s(model)])
        .args(extra)
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads xtask's stdout up to the `llama-server (pid N) serving …` line (what follows may be
/// lost); returns N and the log path it names.
fn served_pid(xtask: &mut Child) -> (u32, PathBuf) {
    let mut lines = Vec::new();
    let mut out = BufReader::new(xtask.stdout.as_mut().unwrap());
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let mut err = String::new();
            let _ = xtask.stderr.as_mut().unwrap().read_to_string(&mut err);
            panic!("xtask ended before serving: {lines:?} {err}");
        }
        lines.push(line.trim_end().to_string());
        if let Some(rest) = line.strip_prefix("llama-server (pid ") {
            let pid = rest.split(')').next().unwrap().parse().unwrap();
            let log = rest
                .rsplit("(log ")
                .next()
                .unwrap()
                .trim_end()
                .trim_end_matches(')');
            return (pid, PathBuf::from(log));
        }
    }
}

/// `kill -INT` / `kill -TERM` sent to xtask alone (not its process group) stops the server it
/// started in the foreground, then ends xtask by that signal (shell status 130 / 143); before,
/// xtask ended and left llama-server running, reparented to init.
#[test]
fn a_signal_to_xtask_stops_its_foreground_server() {
    let _one = servers_one_at_a_time();
    let Some(model) = fixture("dense-target.F32.gguf") else {
        return;
    };
    for (sig, num) in [("INT", 2), ("TERM", 15)] {
        let dir = scratch(&format!("fg-{sig}"));
        let bin = fake_server_bin(&dir, true);
        let mut xtask = start(&bin, &model, &[]);
        let (pid, log) = served_pid(&mut xtask);
        assert!(alive(pid));
        kill(sig, xtask.id());
        let status = wait_bounded(&mut xtask, &format!("xtask to end on SIG{sig}"));
        assert_eq!(status.signal(), Some(num), "{sig}: {status:?}");
        assert!(
            !alive(pid),
            "SIG{sig}: the server (pid {pid}) outlived xtask"
        );
        let _ = std::fs::remove_file(log);
    }
}

/// A signal xtask was started with ignored stays ignored (`trap "" INT` here; `nohup` does so
/// for SIGHUP, a script's `cmd &` for SIGINT): SIGINT leaves xtask and its server running, and
/// SIGTERM then stops both.
#[test]
fn a_signal_ignored_at_start_stays_ignored() {
    let _one = servers_one_at_a_time();
    let Some(model) = fixture("dense-target.F32.gguf") else {
        return;
    };
    let dir = scratch("ignored");
    let bin = fake_server_bin(&dir, true);
    let mut xtask = Command::new("sh")
        .args(["-c", "trap '' INT; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "llama-server",
            "--server-bin",
            s(&bin),
            "--model",
            s(&model),
        ])
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (pid, log) = served_pid(&mut xtask);
    kill("INT", xtask.id());
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        xtask.try_wait().unwrap().is_none(),
        "xtask ended on an ignored SIGINT"
    );
    assert!(alive(pid), "the server was stopped on an ignored SIGINT");
    kill("TERM", xtask.id());
    let status = wait_bounded(&mut xtask, "xtask to end on SIGTERM");
    assert_eq!(status.signal(), Some(15), "{status:?}");
    assert!(!alive(pid), "the server (pid {pid}) outlived xtask");
    let _ = std::fs::remove_file(log);
}

/// A signal while the server is still starting (not yet answering) stops it too.
#[test]
fn a_signal_while_starting_stops_the_server() {
    let _one = servers_one_at_a_time();
    let Some(model) = fixture("dense-target.F32.gguf") else {
        return;
    };
    let dir = scratch("starting");
    let bin = fake_server_bin(&dir, false);
    let port = free_port();
    let mut xtask = start(&bin, &model, &["--port", &port]);
    let pid_file = dir.join("server.pid");
    wait_for("the stand-in server's pid file", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    kill("INT", xtask.id());
    let status = wait_bounded(&mut xtask, "xtask to end on SIGINT while starting");
    assert_eq!(status.signal(), Some(2), "{status:?}");
    assert!(
        !alive(pid),
        "the starting server (pid {pid}) outlived xtask"
    );
    let mut err = String::new();
    xtask.stderr.unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(
        err,
        "stopped by SIGINT while llama-server was starting: stopped it\n"
    );
    let _ = std::fs::remove_file(root().join(format!("target/ext/llama-server-{port}.log")));
}

/// `--detach` still leaves the server running after xtask returns (exit 0), and prints the pid
/// and the kill command that stops it.
#[test]
fn detach_leaves_the_server_running() {
    let _one = servers_one_at_a_time();
    let Some(model) = fixture("dense-target.F32.gguf") else {
        return;
    };
    let dir = scratch("detach");
    let bin = fake_server_bin(&dir, true);
    // xtask returns: read everything it printed
    let out = start(&bin, &model, &["--detach"])
        .wait_with_output()
        .unwrap();
    let rest = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = out.status;
    assert_eq!(status.code(), Some(0), "{rest}");
    let serving = rest
        .lines()
        .find_map(|l| l.strip_prefix("llama-server (pid "))
        .unwrap_or_else(|| panic!("no serving line: {rest}"));
    let pid: u32 = serving.split(')').next().unwrap().parse().unwrap();
    let log = serving
        .rsplit("(log ")
        .next()
        .unwrap()
        .trim_end_matches(')');
    let stop = rest
        .lines()
        .find(|l| l.starts_with("stop it: "))
        .unwrap_or_else(|| panic!("no stop line: {rest}"));
    assert!(
        stop.starts_with(&format!("stop it: kill {pid} (pid also in ")),
        "{stop}"
    );
    let pid_file = stop
        .rsplit("(pid also in ")
        .next()
        .unwrap()
        .trim_end_matches(')');
    assert_eq!(std::fs::read_to_string(pid_file).unwrap(), pid.to_string());
    assert!(
        rest.contains("judge it: cargo xtask conformance --engine llama-server=http://127.0.0.1:"),
        "{rest}"
    );
    assert!(alive(pid), "the detached server (pid {pid}) was stopped");
    kill("TERM", pid);
    wait_for("the detached server to stop", || !alive(pid));
    let _ = std::fs::remove_file(pid_file);
    let _ = std::fs::remove_file(log);
}

/// A model with a NaN weight is refused before anything is built or started, naming the file,
/// tensor and element, as every verb that loads a model refuses it (llama-server started and
/// served it); `--allow-nonfinite` serves it anyway (the stand-in starts, detached).
#[test]
fn a_model_with_nan_weights_is_refused_unless_allowed() {
    let _one = servers_one_at_a_time();
    use reference::gguf::{GgufFile, GgufWriter};
    use reference::quant::GgmlType;
    let Some(model) = fixture("dense-target.F32.gguf") else {
        return;
    };
    let dir = scratch("nonfinite");
    // the fixture with element 0 of its first F32 weight matrix set to NaN
    let src = GgufFile::open(&model).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.set(k, v.clone());
    }
    let mut poisoned = None;
    for t in src.tensors() {
        let mut data = src.tensor_data(t).to_vec();
        if poisoned.is_none() && t.ggml_type == GgmlType::F32 && t.dims.len() == 2 {
            data[..4].copy_from_slice(&f32::NAN.to_le_bytes());
            poisoned = Some(t.name.clone());
        }
        w.add_tensor(&t.name, &t.dims, t.ggml_type, data).unwrap();
    }
    let tensor = poisoned.expect("an F32 weight matrix");
    let bad = dir.join("nan.gguf");
    w.write_file(&bad).unwrap();
    let (code, stdout, stderr, _) = llama_server(&["--model", s(&bad), "--server-bin", "/bin/sh"]);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: --model {}: tensor '{tensor}' (F32): element 0 (row 0) is NaN",
            bad.display()
        )) && stderr.ends_with(
            "a non-finite weight gives NaN logits; --allow-nonfinite serves it anyway, for \
             forensic use\n"
        ),
        "{stderr}"
    );
    let bin = fake_server_bin(&dir, true);
    let out = start(&bin, &bad, &["--detach", "--allow-nonfinite"])
        .wait_with_output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    let pid: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("llama-server (pid "))
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no serving line: {text}"))
        .parse()
        .unwrap();
    kill("TERM", pid);
    wait_for("the detached server to stop", || !alive(pid));
    let pid_file = text
        .lines()
        .find_map(|l| l.split("(pid also in ").nth(1))
        .map(|p| p.trim_end_matches(')').to_string());
    if let Some(p) = pid_file {
        let _ = std::fs::remove_file(p);
    }
}

/// A detached server killed without xtask leaves its pid file; the next start on that port
/// removes it with a note naming it and the dead pid, and writes its own (it was overwritten
/// without a word, and files of other ports were left for ever).
#[test]
fn a_stale_pid_file_is_replaced_with_a_note() {
    let _one = servers_one_at_a_time();
    let Some(model) = fixture("dense-target.F32.gguf") else {
        return;
    };
    let dir = scratch("stale-pid");
    let bin = fake_server_bin(&dir, true);
    let port = free_port();
    let pid_file = root().join(format!("target/ext/llama-server-{port}.pid"));
    let log = root().join(format!("target/ext/llama-server-{port}.log"));
    // starts a detached stand-in on `port`: (its pid, what xtask printed)
    let detach = || {
        let out = start(&bin, &model, &["--detach", "--port", &port])
            .wait_with_output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pid: u32 = text
            .lines()
            .find_map(|l| l.strip_prefix("llama-server (pid "))
            .and_then(|r| r.split(')').next())
            .unwrap_or_else(|| panic!("no serving line: {text}"))
            .parse()
            .unwrap();
        (pid, text)
    };
    let (first, text) = detach();
    assert!(!text.contains("stale pid file"), "{text}");
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap(),
        first.to_string()
    );
    kill("TERM", first);
    wait_for("the first server to stop", || !alive(first));
    let (second, text) = detach();
    assert!(
        text.starts_with(&format!(
            "note: removed the stale pid file {} (pid {first} no longer runs: its server was \
             stopped or killed)\n",
            pid_file.display()
        )),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap(),
        second.to_string()
    );
    kill("TERM", second);
    wait_for("the second server to stop", || !alive(second));
    let _ = std::fs::remove_file(&pid_file);
    let _ = std::fs::remove_file(&log);
}

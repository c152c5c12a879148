//! `xtask` — the project's one CLI, run as `cargo xtask <verb>` through the alias in
//! `.cargo/config.toml`.

fn main() {
    println!("xtask: not yet");
}

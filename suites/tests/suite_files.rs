//! The committed suites load and have the shape `design/conformance.md` §9 and the brief ask for.

use std::path::Path;

use suites::suite::{PromptInput, Suite};

fn load(name: &str) -> Suite {
    Suite::load(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("{name}.toml"))).unwrap()
}

#[test]
fn core_suite_has_25_prompts_with_the_counting_case_at_1024_tokens() {
    let s = load("core");
    assert_eq!(s.settings.name, "core");
    assert_eq!(s.prompts.len(), 25);
    let c = s.prompt("count_300").unwrap();
    assert_eq!(c.max_tokens, 1024);
    match &c.input {
        PromptInput::Messages(m) => assert_eq!(
            m[0].content,
            "Write the numbers from 1 to 300 in order, separated by commas, and nothing more."
        ),
        other => panic!("count_300 must be a chat prompt, got {other:?}"),
    }
}

#[test]
fn smoke_suite_has_3_short_prompts() {
    let s = load("smoke");
    assert_eq!(s.prompts.len(), 3);
    assert!(s.prompts.iter().all(|p| p.max_tokens <= 32));
}

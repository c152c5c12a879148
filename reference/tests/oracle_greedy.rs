//! Plain greedy decoding of the oracle against the float64 transformers `greedy_ids` of every
//! `oracle/<target>.greedy.json` (`fixtures/README-models.md` §6: 64 new tokens, stop ids
//! `[1, 50, 106]`).

mod oracle_common;

use oracle_common::*;
use reference::model::Model;

#[test]
fn greedy_ids_equal_transformers_float64_greedy_on_every_prompt() {
    let Some(fix) = fixtures() else { return };
    let mut n_files = 0;
    for stem in target_stems(&fix) {
        let path = fix.join("oracle").join(format!("{stem}.greedy.json"));
        if !path.exists() {
            continue; // Q2_K has logits only (README-models §3).
        }
        n_files += 1;
        let g = read_json(&path);
        let gguf = fix.join("models").join(format!("{stem}.gguf"));
        let sha = reference::gguf::sha256_file(&gguf).expect("sha256");
        assert_eq!(
            g["target_sha256"].as_str(),
            Some(sha.as_str()),
            "{stem}: target_sha256"
        );
        let model = Model::<f64>::load(&gguf).expect("load");
        let stop = json_ids(&g["stop_ids"]);
        let max_new = g["max_new_tokens"].as_u64().expect("max_new_tokens") as usize;
        for p in g["prompts"].as_array().expect("prompts") {
            let name = p["name"].as_str().unwrap_or("?");
            let want = json_ids(&p["greedy_ids"]);
            let got = model
                .greedy(&json_ids(&p["prompt_ids"]), max_new, &stop)
                .expect("greedy");
            assert_eq!(got.tokens, want, "{stem} / {name}");
            assert!(got
                .top_k
                .iter()
                .zip(&got.tokens)
                .all(|(tk, &id)| tk[0].0 == id && tk.len() == 16));
            println!("{stem} / {name}: {} tokens equal", got.tokens.len());
        }
    }
    assert_eq!(n_files, 6, "expected 6 greedy JSONs");
}

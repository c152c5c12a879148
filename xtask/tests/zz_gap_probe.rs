//! TEMPORARY probe (not committed): top-2 gap distribution at generated positions.
use reference::gguf::GgufFile;
use reference::model::Model;
use reference::tokenizer::{ChatMessage, GemmaTokenizer};

#[test]
fn probe() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures");
    let prompts = [
        "Once upon a time there was a little model that",
        "1, 2, 3, 4, 5,",
        "What is 12 + 30? The answer is",
        "{\"name\": \"alpha\", \"id\":",
        "The quick brown fox",
        "你好，世界！",
        "def add(a, b):\n",
    ];
    let variants: Vec<String> = std::env::var("PROBE_VARIANTS")
        .unwrap_or("F32".into())
        .split(',')
        .map(String::from)
        .collect();
    for stem in ["syn-dense-target", "syn-e2b-target", "syn-moe-target"] {
        for var in &variants {
            let path = dir.join(format!("{stem}.{var}.gguf"));
            let tok = GemmaTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
            let model: Model<f64> = Model::load(&path).unwrap();
            let mut gaps = Vec::new();
            let mut texts = Vec::new();
            let t0 = std::time::Instant::now();
            for (i, p) in prompts.iter().enumerate() {
                let ids = if i == 0 {
                    tok.encode_chat(&[ChatMessage::new("user", *p)], true, false)
                        .unwrap()
                } else {
                    tok.encode(p, true).unwrap()
                };
                let g = model.greedy(&ids, 32, &[]).unwrap();
                for tk in &g.top_k {
                    gaps.push(tk[0].1 - tk[1].1);
                }
                texts.push(tok.decode(&g.tokens).unwrap());
            }
            gaps.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let q = |f: f64| gaps[((gaps.len() - 1) as f64 * f) as usize];
            let dec = |lo: f64, hi: f64| gaps.iter().filter(|&&g| g >= lo && g < hi).count();
            println!("{stem}.{var}: n={} min={:.2e} p5={:.2e} p25={:.2e} p50={:.2e} p75={:.2e} p95={:.2e} max={:.2e} | <1e-3:{} 1e-3..1e-2:{} 1e-2..0.1:{} 0.1..1:{} 1..10:{} >=10:{} | {:.1}s",
            gaps.len(), gaps[0], q(0.05), q(0.25), q(0.5), q(0.75), q(0.95), gaps[gaps.len()-1],
            dec(0.0,1e-3), dec(1e-3,1e-2), dec(1e-2,0.1), dec(0.1,1.0), dec(1.0,10.0), dec(10.0,1e9), t0.elapsed().as_secs_f64());
            for t in texts.iter().take(3) {
                println!("   {:?}", t);
            }
        }
    }
}

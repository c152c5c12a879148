//! Block-format mixes of synthetic models (the GPU bench's 12B-shaped model).

use super::GgmlType;

/// Which block format each weight matrix of a synthetic model gets (the CUDA bench's 12B-shaped
/// model, `runtime bench --format`, `xtask bench --format`): one ggml type for every matrix, or
/// llama.cpp's Q2_K mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightMix {
    /// Every weight matrix (and the tied embedding) in one format.
    Uniform(GgmlType),
    /// llama.cpp's Q2_K mix (`llama-quant.cpp`, `LLAMA_FTYPE_MOSTLY_Q2_K`): `attn_v` and
    /// `ffn_down` Q3_K, `token_embd` (tied output) Q6_K, every other matrix Q2_K.
    Q2KMix,
}

impl WeightMix {
    /// Parses `Q2_K_MIX` (case-insensitive) or a ggml type name.
    pub fn parse(s: &str) -> Option<WeightMix> {
        if s.eq_ignore_ascii_case("q2_k_mix") {
            Some(WeightMix::Q2KMix)
        } else {
            GgmlType::from_name(s).map(WeightMix::Uniform)
        }
    }

    /// The format of the weight named `name` (`attn_q`, `ffn_down`, `token_embd`, …).
    pub fn type_for(self, name: &str) -> GgmlType {
        match self {
            WeightMix::Uniform(t) => t,
            WeightMix::Q2KMix => match name {
                "attn_v" | "ffn_down" => GgmlType::Q3_K,
                "token_embd" => GgmlType::Q6_K,
                _ => GgmlType::Q2_K,
            },
        }
    }

    /// Display name (`Q4_K`, `Q2_K_MIX`).
    pub fn name(self) -> String {
        match self {
            WeightMix::Uniform(t) => t.name().to_string(),
            WeightMix::Q2KMix => "Q2_K_MIX".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mix follows llama.cpp's `LLAMA_FTYPE_MOSTLY_Q2_K` rule as quoted in the doc comment
    /// (`llama-quant.cpp`): attn_v and ffn_down Q3_K, the tied token_embd Q6_K, the rest Q2_K.
    #[test]
    fn parse_and_type_for() {
        for s in ["Q2_K_MIX", "q2_k_mix", "Q2_k_Mix"] {
            assert_eq!(WeightMix::parse(s), Some(WeightMix::Q2KMix), "{s}");
        }
        assert_eq!(
            WeightMix::parse("Q4_K"),
            Some(WeightMix::Uniform(GgmlType::Q4_K))
        );
        assert_eq!(WeightMix::parse("Q2_K_MIXX"), None);
        assert_eq!(WeightMix::parse(""), None);
        let m = WeightMix::Q2KMix;
        assert_eq!(m.type_for("attn_v"), GgmlType::Q3_K);
        assert_eq!(m.type_for("ffn_down"), GgmlType::Q3_K);
        assert_eq!(m.type_for("token_embd"), GgmlType::Q6_K);
        for n in ["attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"] {
            assert_eq!(m.type_for(n), GgmlType::Q2_K, "{n}");
        }
        assert_eq!(
            WeightMix::Uniform(GgmlType::Q8_0).type_for("attn_v"),
            GgmlType::Q8_0
        );
        assert_eq!(m.name(), "Q2_K_MIX");
        assert_eq!(WeightMix::Uniform(GgmlType::BF16).name(), "BF16");
    }
}

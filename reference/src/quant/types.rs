//! The ggml type table: ids, names, block sizes and byte sizes.
//!
//! Spec: `spec/gguf-gemma4.md` §3.1 (supported set) and §3.7 (ids outside it). Upstream:
//! `ggml/include/ggml.h` (`enum ggml_type`), `gguf-py/gguf/constants.py` (`GGML_QUANT_SIZES`).
//! Every id a GGUF file may legally carry is listed, so the reader can validate the size of a
//! tensor it will never decode; [`GgmlType::is_supported`] says which ones [`super`] can decode.

/// One ggml tensor element type (a block format or a plain scalar type).
///
/// The discriminant is the ggml type id as stored in a GGUF tensor info (u32).
#[allow(non_camel_case_types, missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    NVFP4 = 40,
    Q1_0 = 41,
    Q2_0 = 42,
}

/// Every type this project can dequantize and quantize (`spec/gguf-gemma4.md` §3.1).
pub const SUPPORTED_TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

impl GgmlType {
    /// The type for a ggml type id, or `None` for a removed id (4, 5, 31–33, 36–38) or an id
    /// ≥ 43 (`GGML_TYPE_COUNT`).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            16 => IQ2_XXS,
            17 => IQ2_XS,
            18 => IQ3_XXS,
            19 => IQ1_S,
            20 => IQ4_NL,
            21 => IQ3_S,
            22 => IQ2_S,
            23 => IQ4_XS,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => IQ1_M,
            30 => BF16,
            34 => TQ1_0,
            35 => TQ2_0,
            39 => MXFP4,
            40 => NVFP4,
            41 => Q1_0,
            42 => Q2_0,
            _ => return None,
        })
    }

    /// The ggml type id (the value stored in a GGUF tensor info).
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The ggml name, e.g. `"Q4_K"` (as `gguf-dump` prints it).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
            NVFP4 => "NVFP4",
            Q1_0 => "Q1_0",
            Q2_0 => "Q2_0",
        }
    }

    /// The type with this ggml name (case-insensitive), e.g. `"q4_k"`.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        (0..43)
            .filter_map(GgmlType::from_id)
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Elements per block (1 for scalar types); a row's length `ne0` must be a multiple.
    pub fn block_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | I8 | I16 | I32 | I64 | F64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4_NL | MXFP4 => 32,
            NVFP4 | Q2_0 => 64,
            Q1_0 => 128,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K | IQ2_XXS | IQ2_XS | IQ3_XXS | IQ1_S
            | IQ3_S | IQ2_S | IQ4_XS | IQ1_M | TQ1_0 | TQ2_0 => 256,
        }
    }

    /// Bytes per block (`GGML_QUANT_SIZES`).
    pub fn type_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            I8 => 1,
            I64 | F64 => 8,
            Q4_0 | IQ4_NL => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
            IQ2_XXS => 66,
            IQ2_XS => 74,
            IQ3_XXS => 98,
            IQ1_S => 50,
            IQ3_S => 110,
            IQ2_S => 82,
            IQ4_XS => 136,
            IQ1_M => 56,
            TQ1_0 => 54,
            TQ2_0 => 66,
            MXFP4 => 17,
            NVFP4 => 36,
            Q1_0 => 18,
            Q2_0 => 18,
        }
    }

    /// Whether [`super`] can dequantize and quantize this type (the set of §3.1).
    pub fn is_supported(self) -> bool {
        SUPPORTED_TYPES.contains(&self)
    }

    /// Bytes of `n_elements` elements, or `None` when `n_elements` is not a multiple of the
    /// block size or the size overflows `u64`.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(self.type_size() as u64)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes checked against the table of `spec/gguf-gemma4.md` §3.1 (bits/weight column:
    /// 8 · type_size / block_size).
    #[test]
    fn bits_per_weight_match_spec_table() {
        let expect = [
            (GgmlType::Q4_0, 4.5),
            (GgmlType::Q4_1, 5.0),
            (GgmlType::Q5_0, 5.5),
            (GgmlType::Q5_1, 6.0),
            (GgmlType::Q8_0, 8.5),
            (GgmlType::Q2_K, 2.625),
            (GgmlType::Q3_K, 3.4375),
            (GgmlType::Q4_K, 4.5),
            (GgmlType::Q5_K, 5.5),
            (GgmlType::Q6_K, 6.5625),
            (GgmlType::Q8_K, 9.125),
            (GgmlType::IQ4_NL, 4.5),
            (GgmlType::IQ4_XS, 4.25),
        ];
        for (t, bpw) in expect {
            assert_eq!(
                8.0 * t.type_size() as f64 / t.block_size() as f64,
                bpw,
                "{t}"
            );
        }
    }

    #[test]
    fn ids_round_trip_and_removed_ids_are_none() {
        for id in 0..64 {
            match GgmlType::from_id(id) {
                Some(t) => {
                    assert_eq!(t.id(), id);
                    assert_eq!(GgmlType::from_name(t.name()), Some(t));
                }
                None => assert!(
                    [4, 5, 31, 32, 33, 36, 37, 38].contains(&id) || id >= 43,
                    "{id}"
                ),
            }
        }
    }
}

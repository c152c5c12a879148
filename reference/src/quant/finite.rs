//! The non-finite check of loading: every floating field of every block of every tensor, the
//! first NaN/±Inf reported as a typed error naming tensor, block, element, row and field.
//!
//! Spec: conformance contract (`design/conformance.md` §9 "Non-finite values": loading checks
//! every block's scale fields once; `--allow-nonfinite` skips the check),
//! `spec/gguf-gemma4.md` §3.3–§3.4 and §3.7 (block layouts), §3.6 item 3 (NaN/Inf scales
//! propagate through dequantization, so without this check such a file gives NaN logits).
//!
//! Only the floating fields are read: a quantized block's integer codes and 4/6/8-bit
//! sub-scales are finite by construction, so a Q4_K tensor is checked by reading 4 of every 144
//! bytes. Plain float tensors (F32, F16, BF16, F64) are checked element by element. Layouts of
//! the formats outside §3.1 (which nothing here decodes) follow `ggml/src/ggml-common.h`; MXFP4
//! (E8M0) and NVFP4 (UE4M3) scales have no non-finite code in ggml's decoding
//! (`ggml_e8m0_to_fp32_half`, `ggml_ue4m3_to_fp32`), so those formats have no field to check,
//! nor have the integer types.

use half::{bf16, f16};
use rayon::prelude::*;

use super::GgmlType;
use crate::gguf::{GgufFile, TensorInfo};

/// How a floating field is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldKind {
    /// IEEE binary16, little-endian (ggml's `ggml_half`).
    F16,
    /// bfloat16, little-endian (the upper half of a binary32).
    Bf16,
    /// IEEE binary32, little-endian.
    F32,
    /// IEEE binary64, little-endian.
    F64,
    /// IQ1_M's super-block scale: an f16 spread over the top nibbles of the four
    /// little-endian u16 words at the field's offset (`scales`), `(w0 >> 12) | ((w1 >> 8) &
    /// 0xF0) | ((w2 >> 4) & 0xF00) | (w3 & 0xF000)` (ggml `dequantize_row_iq1_m`).
    Iq1mScale,
}

impl FieldKind {
    /// Bytes the field occupies in the block.
    pub fn size(self) -> usize {
        match self {
            FieldKind::F16 | FieldKind::Bf16 => 2,
            FieldKind::F32 => 4,
            FieldKind::F64 | FieldKind::Iq1mScale => 8,
        }
    }
}

/// One floating field of a block: its name in ggml's block struct (`d`, `dmin`, `m`, `s`,
/// `scales`; `value` for a plain float element), its byte offset in the block, its encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScaleField {
    /// Field name (ggml's `block_*` member).
    pub name: &'static str,
    /// Byte offset in the block.
    pub offset: usize,
    /// Encoding.
    pub kind: FieldKind,
}

const fn f(name: &'static str, offset: usize, kind: FieldKind) -> ScaleField {
    ScaleField { name, offset, kind }
}

const VALUE_F32: [ScaleField; 1] = [f("value", 0, FieldKind::F32)];
const VALUE_F16: [ScaleField; 1] = [f("value", 0, FieldKind::F16)];
const VALUE_BF16: [ScaleField; 1] = [f("value", 0, FieldKind::Bf16)];
const VALUE_F64: [ScaleField; 1] = [f("value", 0, FieldKind::F64)];
const D0: [ScaleField; 1] = [f("d", 0, FieldKind::F16)];
const D_M: [ScaleField; 2] = [f("d", 0, FieldKind::F16), f("m", 2, FieldKind::F16)];
const D_S: [ScaleField; 2] = [f("d", 0, FieldKind::F16), f("s", 2, FieldKind::F16)];
const D_DMIN0: [ScaleField; 2] = [f("d", 0, FieldKind::F16), f("dmin", 2, FieldKind::F16)];
const Q2_K_FIELDS: [ScaleField; 2] = [f("d", 80, FieldKind::F16), f("dmin", 82, FieldKind::F16)];
const Q3_K_FIELDS: [ScaleField; 1] = [f("d", 108, FieldKind::F16)];
const Q6_K_FIELDS: [ScaleField; 1] = [f("d", 208, FieldKind::F16)];
const Q8_K_FIELDS: [ScaleField; 1] = [f("d", 0, FieldKind::F32)];
const TQ1_0_FIELDS: [ScaleField; 1] = [f("d", 52, FieldKind::F16)];
const TQ2_0_FIELDS: [ScaleField; 1] = [f("d", 64, FieldKind::F16)];
const IQ1_M_FIELDS: [ScaleField; 1] = [f("scales", 48, FieldKind::Iq1mScale)];

/// The floating fields of one block of `ty` (empty when the format has none that can be
/// non-finite). Offsets: `spec/gguf-gemma4.md` §3.3–§3.4 for the formats of §3.1, ggml's
/// `block_*` structs (`ggml/src/ggml-common.h`) for the others:
///
/// | fields | formats |
/// |---|---|
/// | `value` (the element) | F32, F16, BF16, F64 |
/// | `d` at 0 (f16) | Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, Q1_0, Q2_0 |
/// | `d`, `m` at 0, 2 | Q4_1, Q5_1 |
/// | `d`, `s` at 0, 2 | Q8_1 |
/// | `d`, `dmin` at 0, 2 | Q4_K, Q5_K |
/// | `d`, `dmin` at 80, 82 | Q2_K |
/// | `d` at 108 / 208 | Q3_K / Q6_K |
/// | `d` at 0 (f32) | Q8_K |
/// | `d` at 52 / 64 | TQ1_0 / TQ2_0 |
/// | `scales` at 48 (packed f16) | IQ1_M |
/// | none | MXFP4, NVFP4, I8, I16, I32, I64 |
pub fn scale_fields(ty: GgmlType) -> &'static [ScaleField] {
    use GgmlType::*;
    match ty {
        F32 => &VALUE_F32,
        F16 => &VALUE_F16,
        BF16 => &VALUE_BF16,
        F64 => &VALUE_F64,
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | IQ4_XS | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S
        | IQ1_S | Q1_0 | Q2_0 => &D0,
        Q4_1 | Q5_1 => &D_M,
        Q8_1 => &D_S,
        Q4_K | Q5_K => &D_DMIN0,
        Q2_K => &Q2_K_FIELDS,
        Q3_K => &Q3_K_FIELDS,
        Q6_K => &Q6_K_FIELDS,
        Q8_K => &Q8_K_FIELDS,
        TQ1_0 => &TQ1_0_FIELDS,
        TQ2_0 => &TQ2_0_FIELDS,
        IQ1_M => &IQ1_M_FIELDS,
        MXFP4 | NVFP4 | I8 | I16 | I32 | I64 => &[],
    }
}

/// The field `fld` of `block` (at least `fld.offset + fld.kind.size()` bytes) as `(value,
/// raw bits)`; the value is exact (every f16/bf16/f32 widens exactly to f64).
fn read(block: &[u8], fld: &ScaleField) -> (f64, u64) {
    let o = fld.offset;
    let u16_at = |i: usize| u16::from_le_bytes([block[o + i], block[o + i + 1]]);
    match fld.kind {
        FieldKind::F16 => {
            let b = u16_at(0);
            (f16::from_bits(b).to_f64(), b.into())
        }
        FieldKind::Bf16 => {
            let b = u16_at(0);
            (bf16::from_bits(b).to_f64(), b.into())
        }
        FieldKind::F32 => {
            let b = u32::from_le_bytes([block[o], block[o + 1], block[o + 2], block[o + 3]]);
            (f32::from_bits(b) as f64, b.into())
        }
        FieldKind::F64 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(&block[o..o + 8]);
            let b = u64::from_le_bytes(a);
            (f64::from_bits(b), b)
        }
        FieldKind::Iq1mScale => {
            let b = (u16_at(0) >> 12)
                | ((u16_at(2) >> 8) & 0x00F0)
                | ((u16_at(4) >> 4) & 0x0F00)
                | (u16_at(6) & 0xF000);
            (f16::from_bits(b).to_f64(), b.into())
        }
    }
}

/// Whether field `fld` of `block` is NaN or ±Inf (exponent bits all ones), without decoding.
#[inline(always)]
fn nonfinite(block: &[u8], fld: &ScaleField) -> bool {
    let o = fld.offset;
    match fld.kind {
        FieldKind::F16 => u16::from_le_bytes([block[o], block[o + 1]]) & 0x7C00 == 0x7C00,
        FieldKind::Bf16 => u16::from_le_bytes([block[o], block[o + 1]]) & 0x7F80 == 0x7F80,
        FieldKind::F32 => {
            u32::from_le_bytes([block[o], block[o + 1], block[o + 2], block[o + 3]]) & 0x7F80_0000
                == 0x7F80_0000
        }
        FieldKind::F64 | FieldKind::Iq1mScale => !read(block, fld).0.is_finite(),
    }
}

/// The first non-finite floating field found in a run of blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NonFiniteField {
    /// Index of the block in the bytes given (for F32/F16/BF16/F64: the element index).
    pub block: usize,
    /// The field ([`ScaleField::name`]).
    pub field: &'static str,
    /// Byte offset of the field in the bytes given.
    pub byte: usize,
    /// The field's value (NaN, `inf` or `-inf`).
    pub value: f64,
    /// The field's raw bits (f16/bf16 in the low 16 bits).
    pub bits: u64,
}

/// Index of the first `N`-byte element `e` of `bytes` with `magnitude(e) ≥ limit`: the largest
/// magnitude of each group of 256 elements is taken without an early exit (a max reduction,
/// which vectorizes), then the element is located within the first group that reaches `limit`.
#[inline(always)]
fn first_element<const N: usize, T: Ord + Copy + Default>(
    bytes: &[u8],
    magnitude: impl Fn([u8; N]) -> T,
    limit: T,
) -> Option<usize> {
    let (elems, _) = bytes.as_chunks::<N>();
    let (gi, g) = elems
        .chunks(256)
        .enumerate()
        .find(|(_, g)| g.iter().fold(T::default(), |a, &e| a.max(magnitude(e))) >= limit)?;
    let i = g.iter().position(|&e| magnitude(e) >= limit)?;
    Some(gi * 256 + i)
}

/// The first block of `bytes` (whole blocks of `ty`; a trailing partial block is ignored)
/// with a NaN/±Inf floating field ([`scale_fields`]), the first such field of that block, or
/// `None` when every field is finite (always for a format without floating fields).
pub fn first_nonfinite(ty: GgmlType, bytes: &[u8]) -> Option<NonFiniteField> {
    let fields = scale_fields(ty);
    if fields.is_empty() {
        return None;
    }
    let ts = ty.type_size();
    let (block, fld) = match fields {
        // Plain floats: groups of 256 elements tested without an early exit (vectorizes), the
        // element found within the first group that has one.
        [one] if ts == one.kind.size() => match one.kind {
            // Non-finite ⇔ the magnitude bits are at least those of +Inf.
            FieldKind::F16 => {
                first_element(bytes, |e: [u8; 2]| u16::from_le_bytes(e) & 0x7FFF, 0x7C00)
            }
            FieldKind::Bf16 => {
                first_element(bytes, |e: [u8; 2]| u16::from_le_bytes(e) & 0x7FFF, 0x7F80)
            }
            FieldKind::F32 => first_element(
                bytes,
                |e: [u8; 4]| u32::from_le_bytes(e) & 0x7FFF_FFFF,
                0x7F80_0000,
            ),
            FieldKind::F64 | FieldKind::Iq1mScale => first_element(
                bytes,
                |e: [u8; 8]| u64::from_le_bytes(e) & 0x7FFF_FFFF_FFFF_FFFF,
                0x7FF0_0000_0000_0000,
            ),
        }
        .map(|i| (i, one)),
        // One field (all but the d/m, d/s, d/dmin formats): a tight loop over the blocks.
        [one] => bytes
            .chunks_exact(ts)
            .position(|b| nonfinite(b, one))
            .map(|i| (i, one)),
        _ => bytes.chunks_exact(ts).enumerate().find_map(|(i, b)| {
            fields
                .iter()
                .find(|fld| nonfinite(b, fld))
                .map(|fld| (i, fld))
        }),
    }?;
    let start = block * ts;
    let (value, bits) = read(&bytes[start..start + ts], fld);
    Some(NonFiniteField {
        block,
        field: fld.name,
        byte: start + fld.offset,
        value,
        bits,
    })
}

/// A tensor holds a NaN or ±Inf floating field (a quantized block's scale, or a plain float
/// element): the model is refused at load (conformance contract §9 "Non-finite values";
/// `LoadOptions::allow_nonfinite` of `crate::model` skips the check).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "tensor '{tensor}' ({ty}): {} is {value} (bits {bits:#x}, byte {file_offset} of its file); \
     a non-finite weight gives NaN logits",
    location(.ty, .field, *.block, *.element, *.row)
)]
pub struct NonFiniteError {
    /// GGUF tensor name.
    pub tensor: String,
    /// Its type.
    pub ty: GgmlType,
    /// Block index in the tensor (GGUF order, `ne0` fastest); for F32/F16/BF16/F64 the element
    /// index.
    pub block: u64,
    /// Index of the block's first element in the tensor (`block · block_size`; the element
    /// itself for F32/F16/BF16/F64).
    pub element: u64,
    /// Row of that element: `element / ne0` (a token id for `token_embd.weight`).
    pub row: u64,
    /// The field ([`ScaleField::name`]: `d`, `dmin`, `m`, `s`, `scales`, or `value`).
    pub field: &'static str,
    /// The field's value (NaN, `inf` or `-inf`).
    pub value: f64,
    /// The field's raw bits (f16/bf16 in the low 16 bits).
    pub bits: u64,
    /// Byte position of the field in the file holding the tensor (its shard for a split
    /// model).
    pub file_offset: u64,
}

/// "element 5 (row 0)" for plain floats, "field d of block 3 (row 2, elements 96…127)" else.
fn location(ty: &GgmlType, field: &str, block: u64, element: u64, row: u64) -> String {
    let bs = ty.block_size() as u64;
    if bs == 1 {
        format!("element {element} (row {row})")
    } else {
        format!(
            "field {field} of block {block} (row {row}, elements {element}…{})",
            element + bs - 1
        )
    }
}

/// Blocks per parallel work item of [`check_tensor_finite`] (≈ 1 MiB of data or more).
fn chunk_blocks(ty: GgmlType) -> usize {
    ((1usize << 20) / ty.type_size()).max(1)
}

/// Checks every floating field of every block of tensor `t` of `file` ([`scale_fields`]);
/// the chunks of a large tensor are scanned in parallel and the first non-finite field in
/// tensor order is reported, whatever the thread count.
///
/// Errors: [`NonFiniteError`] naming the tensor, block, element, row and field.
pub fn check_tensor_finite(file: &GgufFile, t: &TensorInfo) -> Result<(), NonFiniteError> {
    let ty = t.ggml_type;
    if scale_fields(ty).is_empty() {
        return Ok(());
    }
    let bytes = file.tensor_data(t);
    let per = chunk_blocks(ty);
    let found = bytes
        .par_chunks(per * ty.type_size())
        .enumerate()
        .find_map_first(|(c, chunk)| {
            first_nonfinite(ty, chunk).map(|f| NonFiniteField {
                block: c * per + f.block,
                byte: c * per * ty.type_size() + f.byte,
                ..f
            })
        });
    let Some(f) = found else { return Ok(()) };
    let element = f.block as u64 * ty.block_size() as u64;
    Err(NonFiniteError {
        tensor: t.name.clone(),
        ty,
        block: f.block as u64,
        element,
        row: element / t.dims.first().copied().unwrap_or(1).max(1),
        field: f.field,
        value: f.value,
        bits: f.bits,
        file_offset: file.tensor_file_offset(t).saturating_add(f.byte as u64),
    })
}

/// Checks every tensor of `file` ([`check_tensor_finite`]) — what the model loaders run by
/// default (conformance contract §9). Tensors are scanned in parallel; the error is the first
/// non-finite field in file order (tensor order, then block order), whatever the thread count.
///
/// Errors: [`NonFiniteError`] for the first non-finite field.
pub fn check_finite(file: &GgufFile) -> Result<(), NonFiniteError> {
    match file
        .tensors()
        .par_iter()
        .find_map_first(|t| check_tensor_finite(file, t).err())
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field lies inside its block, for every type id a GGUF may carry.
    #[test]
    fn fields_lie_inside_their_blocks() {
        for ty in (0..64).filter_map(GgmlType::from_id) {
            for fld in scale_fields(ty) {
                assert!(
                    fld.offset + fld.kind.size() <= ty.type_size(),
                    "{ty} {fld:?}"
                );
            }
        }
    }

    /// IQ1_M's packed scale: the f16's nibbles, high to low, are the top nibbles of words 3, 2,
    /// 1, 0 (the low 12 bits of each word are sub-scales and are ignored). Words 0xF1FF, 0x0ABC,
    /// 0xC123, 0x7FFF give 0x7C0F (exponent all ones, mantissa ≠ 0: NaN); 0, 0, 0xC000, 0x7000
    /// give 0x7C00 (+Inf); 0x3000, 0, 0xC000, 0x3000 give 0x3C03 (finite, 1 + 3·2^-10).
    #[test]
    fn iq1_m_scale_unpacks_the_top_nibbles() {
        let block = |w: [u16; 4]| {
            let mut b = vec![0u8; 56];
            for (i, x) in w.iter().enumerate() {
                b[48 + 2 * i..50 + 2 * i].copy_from_slice(&x.to_le_bytes());
            }
            b
        };
        let fld = &IQ1_M_FIELDS[0];
        let (v, bits) = read(&block([0xF1FF, 0x0ABC, 0xC123, 0x7FFF]), fld);
        assert_eq!(bits, 0x7C0F);
        assert!(v.is_nan());
        let inf = block([0, 0, 0xC000, 0x7000]);
        assert_eq!(read(&inf, fld), (f64::INFINITY, 0x7C00));
        assert!(nonfinite(&inf, fld));
        let one = block([0x3000, 0, 0xC000, 0x3000]);
        assert_eq!(read(&one, fld), (1.0 + 3.0 / 1024.0, 0x3C03));
        assert!(!nonfinite(&one, fld));
    }
}

//! The float type the forward pass is written over (`design/style.md` R3): `f64` is the oracle,
//! `f32` the cheap CI engine. Every op of `model/` is written once against [`Float`]; the only
//! type-specific code is here (conversions, the libm functions and which dequantizer feeds the
//! weights: exact f64 values, or their f32 rounding as gguf-py gives them, `spec/gguf-gemma4.md`
//! §3.6).

use std::fmt::{Debug, Display};
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

use crate::quant::{GgmlType, QuantError};

/// A real scalar type for the generic forward (implemented for `f64` and `f32`).
///
/// Arithmetic is plain IEEE arithmetic of the type (no fused multiply-add is ever requested, so
/// results do not depend on the target CPU's FMA support).
pub trait Float:
    Copy
    + Send
    + Sync
    + Debug
    + Display
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + Sum
    + 'static
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Type name (`"f64"`, `"f32"`), for reports.
    const NAME: &'static str;
    /// Round an f64 to this type (identity for f64).
    fn from_f64(x: f64) -> Self;
    /// Widen to f64 (exact).
    fn to_f64(self) -> f64;
    /// `n` as this type (exact for the sizes and positions used here, < 2^24).
    fn from_usize(n: usize) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// `e^x`.
    fn exp(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Cosine (radians).
    fn cos(self) -> Self;
    /// Sine (radians).
    fn sin(self) -> Self;
    /// `self^e`.
    fn powf(self, e: Self) -> Self;
    /// Dequantize `bytes` (whole blocks of `ty`) into `out` (`out.len()` elements): the exact
    /// value for f64, its f32 rounding for f32 (`reference::quant`).
    fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [Self]) -> Result<(), QuantError>;
}

impl Float for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    const NAME: &'static str = "f64";
    fn from_f64(x: f64) -> f64 {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_usize(n: usize) -> f64 {
        n as f64
    }
    fn sqrt(self) -> f64 {
        f64::sqrt(self)
    }
    fn exp(self) -> f64 {
        f64::exp(self)
    }
    fn tanh(self) -> f64 {
        f64::tanh(self)
    }
    fn cos(self) -> f64 {
        f64::cos(self)
    }
    fn sin(self) -> f64 {
        f64::sin(self)
    }
    fn powf(self, e: f64) -> f64 {
        f64::powf(self, e)
    }
    fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f64]) -> Result<(), QuantError> {
        crate::quant::dequantize(ty, bytes, out)
    }
}

impl Float for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    const NAME: &'static str = "f32";
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_usize(n: usize) -> f32 {
        n as f32
    }
    fn sqrt(self) -> f32 {
        f32::sqrt(self)
    }
    fn exp(self) -> f32 {
        f32::exp(self)
    }
    fn tanh(self) -> f32 {
        f32::tanh(self)
    }
    fn cos(self) -> f32 {
        f32::cos(self)
    }
    fn sin(self) -> f32 {
        f32::sin(self)
    }
    fn powf(self, e: f32) -> f32 {
        f32::powf(self, e)
    }
    fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
        crate::quant::dequantize_f32(ty, bytes, out)
    }
}

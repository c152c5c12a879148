//! Weights as GGUF blocks and the linear layer `y = x · Wᵀ` (`spec/gemma4-text.md` §1: every
//! Gemma-4 linear is bias-free, weight `[out, in]`).
//!
//! Weights are never copied whole: [`linear`] dequantizes a tile of weight rows into a small
//! buffer and multiplies it against all `T` positions before moving on (so the dequantization
//! cost is amortised over `T` and the tile stays in cache).
//!
//! Determinism: every output element is one [`dot`]-ordered sum (fixed lane split, fixed combine
//! order) computed by one task; tasks are independent output tiles. The result is therefore
//! bitwise identical for any thread count, any tile size and any number of positions `T` (a
//! one-token decode step computes exactly the numbers a full forward computes for that row).

use rayon::prelude::*;

use super::{Float, ModelError};
use crate::gguf::GgufFile;
use crate::quant::GgmlType;

/// Interleaved partial sums per dot product (fixed: part of the numerical definition).
pub const LANES: usize = 4;

/// Target size (elements) of one dequantized weight tile.
const TILE_ELEMS: usize = 16 * 1024;

/// A weight matrix `[rows, cols]` (row-major; `cols` = GGUF `ne0`) that lives in the GGUF file:
/// tensor index into `GgufFile::tensors()` plus a row range (experts are row ranges of one 3-D
/// tensor).
#[derive(Debug, Clone)]
pub struct Mat {
    /// GGUF tensor name (for errors).
    pub name: String,
    /// Block type.
    pub ty: GgmlType,
    /// Output rows `N`.
    pub rows: usize,
    /// Input length `K` (row length).
    pub cols: usize,
    /// Index into `GgufFile::tensors()`.
    tensor: usize,
    /// First row within the tensor.
    row0: usize,
}

/// A borrowed view of a [`Mat`]: its bytes (exactly `rows` rows of blocks).
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    /// GGUF tensor name (for errors).
    pub name: &'a str,
    /// Block type.
    pub ty: GgmlType,
    /// Output rows `N`.
    pub rows: usize,
    /// Input length `K`.
    pub cols: usize,
    /// `rows · row_bytes` bytes.
    pub bytes: &'a [u8],
}

impl Mat {
    /// The whole tensor `name` seen as `[n_rows, row_len]` (`n_rows` = product of the GGUF dims
    /// after the first). Errors: missing tensor; row length not a whole number of blocks.
    pub fn load(file: &GgufFile, name: &str) -> Result<Mat, ModelError> {
        let idx = file
            .tensors()
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| ModelError::MissingTensor { name: name.to_string() })?;
        let t = &file.tensors()[idx];
        let cols = t.dims.first().copied().unwrap_or(1) as usize;
        let rows = t.dims.iter().skip(1).product::<u64>() as usize;
        if t.ggml_type.bytes_for(cols as u64).is_none() {
            return Err(ModelError::Shape {
                tensor: name.to_string(),
                problem: format!("row length {cols} is not a multiple of the {} block size", t.ggml_type),
            });
        }
        Ok(Mat {
            name: name.to_string(),
            ty: t.ggml_type,
            rows,
            cols,
            tensor: idx,
            row0: 0,
        })
    }

    /// Rows `r0 .. r0 + n` of this matrix as a matrix of its own (one expert of a 3-D tensor).
    pub fn sub_rows(&self, r0: usize, n: usize) -> Mat {
        assert!(r0 + n <= self.rows, "sub_rows out of range");
        Mat {
            name: self.name.clone(),
            rows: n,
            row0: self.row0 + r0,
            ..self.clone()
        }
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ty.bytes_for(self.cols as u64).unwrap_or(0) as usize
    }

    /// The view of this matrix in `file`.
    pub fn view<'a>(&'a self, file: &'a GgufFile) -> MatRef<'a> {
        let data = file.tensor_data(&file.tensors()[self.tensor]);
        let rb = self.row_bytes();
        MatRef {
            name: &self.name,
            ty: self.ty,
            rows: self.rows,
            cols: self.cols,
            bytes: &data[self.row0 * rb..(self.row0 + self.rows) * rb],
        }
    }
}

impl MatRef<'_> {
    /// Dequantizes rows `r0 .. r0 + out.len()/cols` into `out` (`[n, cols]`, row-major).
    pub fn rows_into<F: Float>(&self, r0: usize, out: &mut [F]) -> Result<(), ModelError> {
        let n = out.len() / self.cols;
        let rb = self.bytes.len() / self.rows.max(1);
        F::dequantize(self.ty, &self.bytes[r0 * rb..(r0 + n) * rb], out).map_err(|source| {
            ModelError::Tensor {
                name: self.name.to_string(),
                source,
            }
        })
    }

    /// Dequantizes the whole (small) matrix: `[rows, cols]`. Only for vectors and tiny tensors.
    pub fn to_vec<F: Float>(&self) -> Result<Vec<F>, ModelError> {
        let mut out = vec![F::ZERO; self.rows * self.cols];
        self.rows_into(0, &mut out)?;
        Ok(out)
    }
}

/// The dot product `Σ_k a[k]·b[k]` in the fixed order of this module: `LANES` interleaved
/// partial sums (lane `j` adds `k ≡ j mod LANES` over the largest multiple of `LANES`), combined
/// as `(s0 + s1) + (s2 + s3)`, then the tail added in order. `a.len() == b.len()`.
pub fn dot<F: Float>(a: &[F], b: &[F]) -> F {
    dots::<F, 1, 1>([a], [b])[0][0]
}

/// `NP × NR` dot products of `xs[p]` with `ws[r]`, each in exactly the order of [`dot`] (so the
/// result does not depend on how outputs are grouped into blocks). All slices have equal length.
#[inline(always)]
fn dots<F: Float, const NP: usize, const NR: usize>(xs: [&[F]; NP], ws: [&[F]; NR]) -> [[F; NR]; NP] {
    let k = xs[0].len();
    for x in xs {
        assert_eq!(x.len(), k);
    }
    for w in ws {
        assert_eq!(w.len(), k);
    }
    let kc = k - k % LANES;
    let mut acc = [[[F::ZERO; LANES]; NR]; NP];
    let mut i = 0;
    while i < kc {
        for p in 0..NP {
            let xp = &xs[p][i..i + LANES];
            for r in 0..NR {
                let wr = &ws[r][i..i + LANES];
                for j in 0..LANES {
                    acc[p][r][j] += xp[j] * wr[j];
                }
            }
        }
        i += LANES;
    }
    let mut out = [[F::ZERO; NR]; NP];
    for p in 0..NP {
        for r in 0..NR {
            let a = acc[p][r];
            let mut s = (a[0] + a[1]) + (a[2] + a[3]);
            for i in kc..k {
                s += xs[p][i] * ws[r][i];
            }
            out[p][r] = s;
        }
    }
    out
}

/// `outT[r, t] = dot(x[t], w[r])` for a dequantized tile: `x` `[T, K]`, `w` `[R, K]`, `out_t`
/// `[R, T]` (row-major). Blocks of 2 positions × 4 rows share loads.
fn tile_product<F: Float>(x: &[F], t_n: usize, w: &[F], k: usize, out_t: &mut [F]) {
    let r_n = w.len() / k;
    let xr = |t: usize| &x[t * k..(t + 1) * k];
    let wr = |r: usize| &w[r * k..(r + 1) * k];
    let mut r = 0;
    while r < r_n {
        let nr = (r_n - r).min(4);
        let mut t = 0;
        while t < t_n {
            let np = (t_n - t).min(2);
            match (np, nr) {
                (2, 4) => {
                    let d = dots::<F, 2, 4>([xr(t), xr(t + 1)], [wr(r), wr(r + 1), wr(r + 2), wr(r + 3)]);
                    for (p, row) in d.iter().enumerate() {
                        for (j, &v) in row.iter().enumerate() {
                            out_t[(r + j) * t_n + t + p] = v;
                        }
                    }
                }
                (1, 4) => {
                    let d = dots::<F, 1, 4>([xr(t)], [wr(r), wr(r + 1), wr(r + 2), wr(r + 3)]);
                    for (j, &v) in d[0].iter().enumerate() {
                        out_t[(r + j) * t_n + t] = v;
                    }
                }
                _ => {
                    for p in 0..np {
                        for j in 0..nr {
                            out_t[(r + j) * t_n + t + p] = dot(xr(t + p), wr(r + j));
                        }
                    }
                }
            }
            t += np;
        }
        r += nr;
    }
}

/// Rows per tile for row length `k` (a multiple of 4, at least 4).
fn tile_rows(k: usize) -> usize {
    ((TILE_ELEMS / k.max(1)) / 4 * 4).max(4)
}

/// The linear layer `y = x · Wᵀ`: `x` `[T, K]`, `w` `[N, K]`, returns `y` `[T, N]` (row-major).
///
/// Parallel over tiles of weight rows (rayon); each tile is dequantized once and multiplied
/// against all `T` positions. Errors: a weight block that fails to decode (names the tensor).
pub fn linear<F: Float>(x: &[F], t_n: usize, w: MatRef<'_>) -> Result<Vec<F>, ModelError> {
    let (n, k) = (w.rows, w.cols);
    assert_eq!(x.len(), t_n * k, "linear: x is not [T, K] for {}", w.name);
    if t_n == 0 || n == 0 {
        return Ok(vec![F::ZERO; t_n * n]);
    }
    let rows = tile_rows(k);
    let mut out_t = vec![F::ZERO; n * t_n];
    out_t
        .par_chunks_mut(rows * t_n)
        .enumerate()
        .try_for_each(|(i, chunk)| -> Result<(), ModelError> {
            let r0 = i * rows;
            let nr = chunk.len() / t_n;
            let mut buf = vec![F::ZERO; nr * k];
            w.rows_into(r0, &mut buf)?;
            tile_product(x, t_n, &buf, k, chunk);
            Ok(())
        })?;
    Ok(transpose(&out_t, n, t_n))
}

/// `[a, b]` → `[b, a]` (row-major).
pub fn transpose<F: Float>(m: &[F], a: usize, b: usize) -> Vec<F> {
    let mut out = vec![F::ZERO; a * b];
    for i in 0..a {
        for j in 0..b {
            out[j * a + i] = m[i * b + j];
        }
    }
    out
}

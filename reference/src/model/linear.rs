//! Weights as GGUF blocks and the linear layer `y = x · Wᵀ` (`spec/gemma4-text.md` §1: every
//! Gemma-4 linear is bias-free, weight `[out, in]`).
//!
//! Weights are never copied whole: [`linear`] dequantizes a tile of weight rows into a small
//! buffer and multiplies it against all `T` positions before moving on (so the dequantization
//! cost is amortised over `T` and the tile stays in cache).
//!
//! Determinism: every output element is one sum in the order of [`dot`] (`k = 0, 1, …`) computed
//! by one task; tasks are independent output tiles. The result is therefore
//! bitwise identical for any thread count, any tile size and any number of positions `T` (a
//! one-token decode step computes exactly the numbers a full forward computes for that row).

use rayon::prelude::*;

use super::{Float, ModelError};
use crate::gguf::GgufFile;
use crate::quant::GgmlType;

/// Target size (elements) of one dequantized weight tile.
const TILE_ELEMS: usize = 16 * 1024;

/// Positions per inner block of the tile product.
const POS_BLOCK: usize = 64;

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
            .ok_or_else(|| ModelError::MissingTensor {
                name: name.to_string(),
            })?;
        let t = &file.tensors()[idx];
        let cols = t.dims.first().copied().unwrap_or(1) as usize;
        let rows = t.dims.iter().skip(1).product::<u64>() as usize;
        if t.ggml_type.bytes_for(cols as u64).is_none() {
            return Err(ModelError::Shape {
                tensor: name.to_string(),
                problem: format!(
                    "row length {cols} is not a multiple of the {} block size",
                    t.ggml_type
                ),
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

/// The dot product `Σ_k a[k]·b[k]`, summed strictly in order `k = 0, 1, …` from 0 (the one
/// summation order of every dot product in the forward). `a.len() == b.len()`.
pub fn dot<F: Float>(a: &[F], b: &[F]) -> F {
    assert_eq!(a.len(), b.len());
    let mut s = F::ZERO;
    for (&x, &y) in a.iter().zip(b) {
        s += x * y;
    }
    s
}

/// `out_t[r, t] = Σ_k w[r, k] · xt[k, t]` for one dequantized tile, each sum in order
/// `k = 0, 1, …` from 0 (exactly [`dot`]): `xt` `[K, T]` (x transposed), `w` `[R, K]`, `out_t`
/// `[R, T]`. Vectorised across positions (independent sums), never across `k`: 4 weight rows
/// share each load of `xt[k, t0 .. t0 + 64]`.
fn tile_product<F: Float>(xt: &[F], t_n: usize, w: &[F], k_n: usize, out_t: &mut [F]) {
    let r_n = w.len() / k_n;
    if t_n < FEW_POSITIONS {
        return few_positions_product(xt, t_n, w, k_n, out_t);
    }
    for v in out_t.iter_mut() {
        *v = F::ZERO;
    }
    let mut r0 = 0;
    while r0 < r_n {
        let nr = (r_n - r0).min(4);
        let mut t0 = 0;
        while t0 < t_n {
            let tb = (t_n - t0).min(POS_BLOCK);
            for k in 0..k_n {
                let xk = &xt[k * t_n + t0..k * t_n + t0 + tb];
                for r in r0..r0 + nr {
                    let wv = w[r * k_n + k];
                    let acc = &mut out_t[r * t_n + t0..r * t_n + t0 + tb];
                    for (a, &x) in acc.iter_mut().zip(xk) {
                        *a += wv * x;
                    }
                }
            }
            t0 += tb;
        }
        r0 += nr;
    }
}

/// Below this many positions [`tile_product`] runs 8 weight rows side by side per position
/// instead of vectorising across positions (decode steps, `T = 1`).
const FEW_POSITIONS: usize = 8;

/// [`tile_product`] for `T < FEW_POSITIONS`: per position, 8 rows at a time, each sum in the
/// order of [`dot`] (8 independent chains give the instruction-level parallelism).
fn few_positions_product<F: Float>(xt: &[F], t_n: usize, w: &[F], k_n: usize, out_t: &mut [F]) {
    const R: usize = 8;
    let r_n = w.len() / k_n;
    for t in 0..t_n {
        let x: Vec<F> = (0..k_n).map(|k| xt[k * t_n + t]).collect();
        let mut r0 = 0;
        while r0 + R <= r_n {
            let rows: [&[F]; R] = std::array::from_fn(|j| &w[(r0 + j) * k_n..(r0 + j + 1) * k_n]);
            let mut acc = [F::ZERO; R];
            for (k, &xk) in x.iter().enumerate() {
                for j in 0..R {
                    acc[j] += xk * rows[j][k];
                }
            }
            for (j, &a) in acc.iter().enumerate() {
                out_t[(r0 + j) * t_n + t] = a;
            }
            r0 += R;
        }
        for r in r0..r_n {
            out_t[r * t_n + t] = dot(&x, &w[r * k_n..(r + 1) * k_n]);
        }
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
    let xt = transpose(x, t_n, k);
    let mut out_t = vec![F::ZERO; n * t_n];
    out_t.par_chunks_mut(rows * t_n).enumerate().try_for_each(
        |(i, chunk)| -> Result<(), ModelError> {
            let r0 = i * rows;
            let nr = chunk.len() / t_n;
            let mut buf = vec![F::ZERO; nr * k];
            w.rows_into(r0, &mut buf)?;
            tile_product(&xt, t_n, &buf, k, chunk);
            Ok(())
        },
    )?;
    Ok(transpose(&out_t, n, t_n))
}

/// `[a, b]` → `[b, a]` (row-major). Parallel over blocks of 8 output rows; each task reads one
/// cache line per input row.
pub fn transpose<F: Float>(m: &[F], a: usize, b: usize) -> Vec<F> {
    const BLOCK: usize = 8;
    let mut out = vec![F::ZERO; a * b];
    if a == 0 || b == 0 {
        return out;
    }
    out.par_chunks_mut(BLOCK * a)
        .enumerate()
        .for_each(|(c, rows)| {
            let j0 = c * BLOCK;
            let nj = rows.len() / a;
            for i in 0..a {
                let src = &m[i * b + j0..i * b + j0 + nj];
                for (jj, &v) in src.iter().enumerate() {
                    rows[jj * a + i] = v;
                }
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An F32 matrix view over little-endian bytes.
    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn linear_equals_ordered_dot_for_every_batch_size_and_thread_count() {
        let (n, k) = (37, 70);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0)
            .collect();
        let bytes = f32_bytes(&w);
        let m = MatRef {
            name: "w",
            ty: GgmlType::F32,
            rows: n,
            cols: k,
            bytes: &bytes,
        };
        let t_n = 71;
        let x: Vec<f64> = (0..t_n * k)
            .map(|i| ((i * 104729) % 977) as f64 / 31.0 - 15.0)
            .collect();
        let full = linear(&x, t_n, m).expect("linear");
        for t in [0, 1, 64, 70] {
            let one = linear(&x[t * k..(t + 1) * k], 1, m).expect("row");
            for r in 0..n {
                let wr: Vec<f64> = w[r * k..(r + 1) * k].iter().map(|&v| v as f64).collect();
                let want = dot(&x[t * k..(t + 1) * k], &wr);
                assert_eq!(full[t * n + r].to_bits(), want.to_bits());
                assert_eq!(one[r].to_bits(), want.to_bits());
            }
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .expect("pool");
        let three = pool.install(|| linear(&x, t_n, m).expect("linear"));
        assert!(three
            .iter()
            .zip(&full)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

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

/// Rows of one register block of [`block_product`].
const MR: usize = 4;

/// Positions of one packed panel of `x` (and of one register block).
const NP: usize = 4;

/// Packs `x` `[T, K]` into position panels: panel `p` is `[K, NP]` holding positions
/// `p·NP .. p·NP + NP` (zeros past `T`), so one step `k` of [`block_product`] reads the
/// `NP` positions of column `k` contiguously. Returns `[⌈T/NP⌉, K, NP]`.
fn pack_panels<F: Float>(x: &[F], t_n: usize, k_n: usize) -> Vec<F> {
    let n_panels = t_n.div_ceil(NP);
    let mut out = vec![F::ZERO; n_panels * k_n * NP];
    out.par_chunks_mut(k_n * NP)
        .enumerate()
        .for_each(|(p, panel)| {
            for j in 0..NP.min(t_n - p * NP) {
                let row = &x[(p * NP + j) * k_n..(p * NP + j + 1) * k_n];
                for (dst, &v) in panel.chunks_exact_mut(NP).zip(row) {
                    dst[j] = v;
                }
            }
        });
    out
}

/// The `MR × NP` register block `acc[i][j] = Σ_k w_i[k] · panel[k, j]`: `w` holds `MR` rows of
/// length `K` back to back, `panel` is `[K, NP]`. Every one of the 16 sums starts at 0 and adds
/// `w_i[k] · x_j[k]` in order `k = 0, 1, …` (exactly [`dot`]); they are independent accumulators,
/// so the compiler vectorises across `j` without reordering any sum.
// Not inlined: compiled on its own, the SLP vectoriser reliably packs the accumulators (inlined
// into a larger closure it was seen to fall back to scalar code with spills).
#[inline(never)]
fn block_product<F: Float>(w: &[F], k_n: usize, panel: &[F]) -> [[F; NP]; MR] {
    let (w0, rest) = w.split_at(k_n);
    let (w1, rest) = rest.split_at(k_n);
    let (w2, w3) = rest.split_at(k_n);
    let mut acc = [[F::ZERO; NP]; MR];
    for ((((x, &a), &b), &c), &d) in panel
        .chunks_exact(NP)
        .zip(&w0[..k_n])
        .zip(&w1[..k_n])
        .zip(&w2[..k_n])
        .zip(&w3[..k_n])
    {
        let x: [F; NP] = [x[0], x[1], x[2], x[3]];
        for j in 0..NP {
            acc[0][j] += a * x[j];
        }
        for j in 0..NP {
            acc[1][j] += b * x[j];
        }
        for j in 0..NP {
            acc[2][j] += c * x[j];
        }
        for j in 0..NP {
            acc[3][j] += d * x[j];
        }
    }
    acc
}

/// `out_t[r, t] = Σ_k w[r, k] · x[t, k]` for one dequantized tile, each sum in order
/// `k = 0, 1, …` from 0 (exactly [`dot`]): `panels` = [`pack_panels`] of `x` (`T` positions),
/// `w` `[R', K]` with `R'` a multiple of [`MR`] (rows past `R` are padding), `out_t` `[R, T]`.
/// Register-blocked `MR` rows × `NP` positions; panels outer so the tile stays in cache.
fn tile_product<F: Float>(panels: &[F], t_n: usize, w: &[F], k_n: usize, out_t: &mut [F]) {
    let r_n = out_t.len() / t_n;
    for (p, panel) in panels.chunks_exact(k_n * NP).enumerate() {
        let t0 = p * NP;
        let nt = NP.min(t_n - t0);
        for (b, wb) in w.chunks_exact(MR * k_n).enumerate() {
            let acc = block_product(wb, k_n, panel);
            let r0 = b * MR;
            for (i, row) in acc.iter().enumerate().take(MR.min(r_n - r0)) {
                out_t[(r0 + i) * t_n + t0..(r0 + i) * t_n + t0 + nt].copy_from_slice(&row[..nt]);
            }
        }
    }
}

/// Below this many positions [`linear`] runs [`few_positions_product`] (decode steps, `T = 1`)
/// instead of packing position panels.
const FEW_POSITIONS: usize = 4;

/// The tile product for `T < FEW_POSITIONS`: `x` `[T, K]`, `w` `[R', K]`, `out_t` `[R, T]`;
/// per position, 8 rows at a time, each sum in the order of [`dot`] (8 independent chains give
/// the instruction-level parallelism).
fn few_positions_product<F: Float>(x: &[F], t_n: usize, w: &[F], k_n: usize, out_t: &mut [F]) {
    const R: usize = 8;
    let r_n = out_t.len() / t_n;
    for t in 0..t_n {
        let x = &x[t * k_n..(t + 1) * k_n];
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
            out_t[r * t_n + t] = dot(x, &w[r * k_n..(r + 1) * k_n]);
        }
    }
}

/// Rows per tile for row length `k` (a multiple of [`MR`], at least [`MR`]).
fn tile_rows(k: usize) -> usize {
    ((TILE_ELEMS / k.max(1)) / MR * MR).max(MR)
}

/// Below this many positions [`linear`] parallelises over weight-row tiles (and transposes the
/// small result); from here on over position panels, writing `y` directly.
const PANEL_PARALLEL_POSITIONS: usize = 16;

/// Target size (elements) of one dequantized super-tile of [`linear_by_panels`] (1 MiB of f64:
/// stays in each core's L2 while every panel streams past it).
const SUPER_TILE_ELEMS: usize = 128 * 1024;

/// The linear layer `y = x · Wᵀ`: `x` `[T, K]`, `w` `[N, K]`, returns `y` `[T, N]` (row-major).
///
/// Every `y[t, r]` is one sum in the order of [`dot`] computed by one task, whatever the path:
/// few positions run in parallel over tiles of weight rows (each dequantized once, multiplied
/// against all `T` positions, the `[N, T]` result transposed); many positions run super-tile by
/// super-tile (dequantized in parallel), in parallel over position panels. Errors: a weight
/// block that fails to decode (names the tensor).
pub fn linear<F: Float>(x: &[F], t_n: usize, w: MatRef<'_>) -> Result<Vec<F>, ModelError> {
    let (n, k) = (w.rows, w.cols);
    assert_eq!(x.len(), t_n * k, "linear: x is not [T, K] for {}", w.name);
    if t_n == 0 || n == 0 {
        return Ok(vec![F::ZERO; t_n * n]);
    }
    if t_n >= PANEL_PARALLEL_POSITIONS {
        return linear_by_panels(x, t_n, w);
    }
    let rows = tile_rows(k);
    let panels = if t_n >= FEW_POSITIONS {
        pack_panels(x, t_n, k)
    } else {
        Vec::new()
    };
    let mut out_t = vec![F::ZERO; n * t_n];
    out_t
        .par_chunks_mut(rows * t_n)
        .enumerate()
        .try_for_each_init(
            Vec::new,
            |buf: &mut Vec<F>, (i, chunk)| -> Result<(), ModelError> {
                let r0 = i * rows;
                let nr = chunk.len() / t_n;
                let padded = nr.div_ceil(MR) * MR;
                buf.clear();
                buf.resize(padded * k, F::ZERO);
                w.rows_into(r0, &mut buf[..nr * k])?;
                if t_n >= FEW_POSITIONS {
                    tile_product(&panels, t_n, buf, k, chunk);
                } else {
                    few_positions_product(x, t_n, buf, k, chunk);
                }
                Ok(())
            },
        )?;
    Ok(transpose(&out_t, n, t_n))
}

/// [`linear`] for `T ≥ PANEL_PARALLEL_POSITIONS`: for each super-tile of weight rows (dequantized
/// in parallel into one shared buffer), each position panel (a task) computes its `NP` rows of
/// `y` for those weight rows with [`block_product`] and writes them in place.
fn linear_by_panels<F: Float>(x: &[F], t_n: usize, w: MatRef<'_>) -> Result<Vec<F>, ModelError> {
    let (n, k) = (w.rows, w.cols);
    let panels = pack_panels(x, t_n, k);
    let s_rows = ((SUPER_TILE_ELEMS / k.max(1)) / MR * MR).max(MR);
    let mut y = vec![F::ZERO; t_n * n];
    let mut buf = vec![F::ZERO; s_rows.min(n).div_ceil(MR) * MR * k];
    let mut r0 = 0;
    while r0 < n {
        let nr = s_rows.min(n - r0);
        let padded = nr.div_ceil(MR) * MR;
        let wt = &mut buf[..padded * k];
        // Dequantize rows r0 .. r0 + nr in parallel (chunks of MR rows); padding rows stay 0.
        wt[nr * k..].fill(F::ZERO);
        wt[..nr * k]
            .par_chunks_mut(MR * k)
            .enumerate()
            .try_for_each(|(c, dst)| -> Result<(), ModelError> { w.rows_into(r0 + c * MR, dst) })?;
        let wt = &*wt;
        y.par_chunks_mut(NP * n)
            .zip(panels.par_chunks_exact(k * NP))
            .for_each(|(yp, panel)| {
                let nt = yp.len() / n;
                for (b, wb) in wt.chunks_exact(MR * k).enumerate() {
                    let acc = block_product(wb, k, panel);
                    let c0 = r0 + b * MR;
                    let nc = MR.min(r0 + nr - c0);
                    for (j, yrow) in yp.chunks_exact_mut(n).enumerate().take(nt) {
                        for i in 0..nc {
                            yrow[c0 + i] = acc[i][j];
                        }
                    }
                }
            });
        r0 += nr;
    }
    Ok(y)
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

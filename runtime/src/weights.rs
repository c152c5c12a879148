//! Weights on the device: raw GGUF block bytes uploaded as-is (no dequantization), so a
//! tensor costs exactly its file size in device memory and kernels decode blocks on the fly.
//! Spec: `spec/gguf-gemma4.md` §3 (blocks), §4.2 (dimension order: dims[0] = row length).

use cudarc::driver::CudaSlice;
use reference::quant::GgmlType;

use crate::error::{drv, RuntimeError};
use crate::ops::{format_suffix, row_bytes};
use crate::Gpu;

/// One tensor on the device in its GGUF block format.
pub struct DeviceTensor {
    /// Tensor name (for errors).
    pub name: String,
    /// Block format.
    pub ty: GgmlType,
    /// Dimensions in GGUF order (`dims[0]` = contiguous row length).
    pub dims: Vec<u64>,
    /// The raw block bytes (256-byte aligned allocation).
    pub data: CudaSlice<u8>,
}

impl DeviceTensor {
    /// Uploads `bytes` (exactly `ty.bytes_for(Π dims)` bytes, rows of whole blocks) to `gpu`.
    ///
    /// Errors: [`RuntimeError::UnsupportedType`] (no kernel for `ty`), [`RuntimeError::Shape`]
    /// (length or row length mismatch), [`RuntimeError::Driver`] (allocation / copy).
    pub fn upload(
        gpu: &Gpu,
        name: &str,
        ty: GgmlType,
        dims: &[u64],
        bytes: &[u8],
    ) -> Result<DeviceTensor, RuntimeError> {
        format_suffix(ty, name)?;
        let n: u64 = dims.iter().product();
        let row_len = *dims.first().unwrap_or(&1) as usize;
        let rb = row_bytes(ty, row_len, name)?;
        let expected = ty.bytes_for(n);
        if dims.is_empty() || expected != Some(bytes.len() as u64) || rb == 0 {
            return Err(RuntimeError::Shape {
                what: name.to_string(),
                detail: format!(
                    "dims {dims:?} of {ty} need {expected:?} bytes, got {}",
                    bytes.len()
                ),
            });
        }
        let data = gpu
            .stream
            .clone_htod(bytes)
            .map_err(drv(format!("upload {name}")))?;
        Ok(DeviceTensor {
            name: name.to_string(),
            ty,
            dims: dims.to_vec(),
            data,
        })
    }

    /// Row length (`dims[0]`).
    pub fn row_len(&self) -> usize {
        self.dims[0] as usize
    }

    /// Number of rows (product of `dims[1..]`).
    pub fn n_rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }

    /// Bytes on the device.
    pub fn n_bytes(&self) -> usize {
        self.data.len()
    }
}

//! A Linear's problem: its shapes and dtype validated before anything touches the device.

use super::{Gate, KernelError, Operand};
use burn_backend::{BoolStore, DType};
use cubecl::prelude::*;

/// Cubes one launch may have along an axis (CUDA's y/z limit; wgpu's default is the same).
pub const MAX_CUBES_PER_AXIS: usize = 65_535;
/// Output rows of one cube of the [tiled kernel](crate::kernel::tiled), the unit of its grid.
pub const TILE_M: usize = 64;
/// Output columns of one cube of the tiled kernel.
pub const TILE_N: usize = 64;

/// Problems (FLOPs, output rows rounded up to a power of two) below which no tensor-core
/// kernel gains anything: one tile's work, launch-bound. There the engine's only candidates
/// would be the tiled kernel and Burn's unfused matmul, and the tiled kernel won every such
/// key of a bf16 Transformer encoder on an H200 (1.4-3.7x), while tuning Burn's matmul there
/// compiled its candidates for 20-40 s a key (decision record 0016).
pub const TENSOR_CORE_MIN_FLOPS: f64 = (1u64 << 24) as f64;

/// A validated problem: everything the launch needs, nothing allocated yet.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearProblem {
    /// Output shape `[batch.., m, n]`.
    pub out_shape: Vec<usize>,
    /// Element type of every operand and output.
    pub dtype: DType,
    /// Product of the batch dims.
    pub batch: usize,
    /// The shared dim.
    pub k: usize,
}

impl LinearProblem {
    /// `[m, k, n]` of one batch, as Burn's matmul autotune key reads them.
    pub fn dims(&self) -> [usize; 3] {
        let r = self.out_shape.len();
        [self.out_shape[r - 2], self.k, self.out_shape[r - 1]]
    }

    /// How this problem multiplies if it is f32, under `config`.
    pub fn f32_math(&self, config: &crate::config::HypatiaConfig) -> crate::config::F32Math {
        let [m, k, n] = self.dims();
        config.f32_math(m, k, n)
    }

    /// Rows of the output (every dim but the last), rounded up to a power of two: the
    /// engine's autotune key's `m`, so that whatever is decided by size holds for a whole key.
    pub fn key_rows(&self) -> usize {
        let r = self.out_shape.len();
        self.out_shape[..r - 1]
            .iter()
            .product::<usize>()
            .next_power_of_two()
    }

    /// Whether the problem is too small for any tensor-core kernel
    /// ([`TENSOR_CORE_MIN_FLOPS`]), read by [`key_rows`](Self::key_rows).
    pub fn is_small(&self) -> bool {
        let n = self.out_shape[self.out_shape.len() - 1];
        2.0 * ((self.key_rows() * self.k * n) as f64) < TENSOR_CORE_MIN_FLOPS
    }

    /// Floating-point operations of the matmul: `2·batch·m·n·k`.
    pub fn flops(&self) -> f64 {
        2.0 * self.out_shape.iter().product::<usize>() as f64 * self.k as f64
    }
}

/// Checks that `lhs · rhs (+ bias)` is a problem the kernel runs, without touching the device.
///
/// # Errors
/// A [`KernelError`] naming the first thing the kernel does not support.
pub fn check_linear(
    lhs: (&[usize], DType),
    rhs: (&[usize], DType),
    bias: Option<(&[usize], DType)>,
) -> Result<LinearProblem, KernelError> {
    let dtype = lhs.1;
    let supported = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    if !supported || rhs.1 != dtype || bias.is_some_and(|b| b.1 != dtype) {
        return Err(KernelError::UnsupportedDtype {
            lhs: lhs.1,
            rhs: rhs.1,
            bias: bias.map(|b| b.1),
        });
    }
    let incompatible = || KernelError::IncompatibleShapes {
        lhs: lhs.0.to_vec(),
        rhs: rhs.0.to_vec(),
        bias: bias.map(|b| b.0.to_vec()),
    };
    let out_shape = matmul_out_shape(lhs.0, rhs.0).ok_or_else(incompatible)?;
    let n = out_shape[out_shape.len() - 1];
    if let Some((shape, _)) = bias {
        let (last, rest) = shape.split_last().ok_or_else(incompatible)?;
        if *last != n || rest.iter().any(|&d| d != 1) || shape.len() > out_shape.len() {
            return Err(incompatible());
        }
    }
    let m = out_shape[out_shape.len() - 2];
    let batch: usize = out_shape[..out_shape.len() - 2].iter().product();
    if m == 0 || n == 0 || batch == 0 {
        return Err(KernelError::Empty { m, n, batch });
    }
    let cubes = [n.div_ceil(TILE_N), m.div_ceil(TILE_M), batch];
    if let Some(&cubes) = cubes.iter().find(|&&c| c > MAX_CUBES_PER_AXIS) {
        return Err(KernelError::GridTooLarge {
            cubes,
            limit: MAX_CUBES_PER_AXIS,
        });
    }
    Ok(LinearProblem {
        out_shape,
        dtype,
        batch,
        k: lhs.0[lhs.0.len() - 1],
    })
}

/// Broadcast matmul output shape with real dims; `None` if `k` or a batch dim disagrees.
fn matmul_out_shape(lhs: &[usize], rhs: &[usize]) -> Option<Vec<usize>> {
    let (lr, rr) = (lhs.len(), rhs.len());
    if lr < 2 || rr < 2 || lhs[lr - 1] != rhs[rr - 2] {
        return None;
    }
    let rank = lr.max(rr);
    let padded = |shape: &[usize], i: usize| {
        let pad = rank - shape.len();
        if i < pad { 1 } else { shape[i - pad] }
    };
    let mut out: Vec<usize> = (0..rank - 2)
        .map(|i| match (padded(lhs, i), padded(rhs, i)) {
            (a, b) if a == b => Some(a),
            (1, b) => Some(b),
            (a, 1) => Some(a),
            _ => None,
        })
        .collect::<Option<_>>()?;
    out.extend([lhs[lr - 2], rhs[rr - 1]]);
    Some(out)
}

/// Checks that `gate` can gate an output of `out_shape` and `dtype` with the backward `kind`:
/// same shape, and same dtype (a bool stored as u8 or u32 for a [bool gate](Gate::is_bool): the
/// kernels read its integer, and a native bool has none), read as rows of the last dim
/// ([`row_stride`]): contiguous, or with rows padded to a pitch, as CubeCL's CUDA runtime
/// allocates tensors whose rows are not a multiple of its alignment. A second or third
/// gate-shaped operand (a saved value) is checked with [`Gate::None`], as a float.
///
/// # Errors
/// [`KernelError::UnsupportedGate`] naming what differs.
pub fn check_gate<R: Runtime>(
    gate: &Operand<R>,
    kind: Gate,
    out_shape: &[usize],
    dtype: DType,
) -> Result<(), KernelError> {
    let rows = row_stride(&gate.shape, &gate.handle.strides);
    let typed = match kind.is_bool() {
        true => bool_gate_bytes(gate.handle.dtype).is_some(),
        false => gate.handle.dtype == dtype,
    };
    if gate.shape != out_shape || !typed || rows.is_none() {
        return Err(KernelError::UnsupportedGate {
            shape: gate.shape.clone(),
            out: out_shape.to_vec(),
        });
    }
    Ok(())
}

/// The bytes per element of a bool gate of `dtype` that the kernels read as an integer (u8 or
/// u32); `None` for any other dtype, a native bool among them.
pub fn bool_gate_bytes(dtype: DType) -> Option<u8> {
    match dtype {
        DType::Bool(BoolStore::U8) => Some(1),
        DType::Bool(BoolStore::U32) => Some(4),
        _ => None,
    }
}

/// The distance between rows of a tensor read as rows of its last dim: its last stride is 1
/// and its leading dims collapse into one row index of that stride (contiguous, or rows padded
/// to a pitch). `None` for any other layout.
///
/// ```
/// use hypatia::kernel::row_stride;
/// assert_eq!(row_stride(&[2, 3, 33], &[99, 33, 1]), Some(33)); // contiguous
/// assert_eq!(row_stride(&[2, 3, 33], &[192, 64, 1]), Some(64)); // rows pitched to 256 bytes
/// assert_eq!(row_stride(&[3, 1, 33], &[64, 64, 1]), Some(64)); // a 1 between
/// assert_eq!(row_stride(&[33, 2], &[1, 33]), None); // transposed
/// assert_eq!(row_stride(&[2, 3, 33], &[200, 64, 1]), None); // batches apart
/// ```
pub fn row_stride(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let (&n, lead) = shape.split_last()?;
    if n > 1 && strides.get(lead.len()) != Some(&1) {
        return None;
    }
    let (mut stride, mut rows) = (None, 1);
    for (&dim, &at) in lead.iter().zip(strides).rev().filter(|(dim, _)| **dim != 1) {
        let row = *stride.get_or_insert(at);
        if row < n || at != row * rows {
            return None;
        }
        rows *= dim;
    }
    Some(stride.unwrap_or(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_broadcast_batch_and_bias() {
        let problem = check_linear(
            (&[2, 3, 4], DType::F32),
            (&[4, 5], DType::F32),
            Some((&[5], DType::F32)),
        );
        assert_eq!(problem.unwrap().out_shape, vec![2, 3, 5]);
        let problem = check_linear(
            (&[2, 3, 4], DType::F32),
            (&[1, 4, 5], DType::F32),
            Some((&[1, 1, 5], DType::F32)),
        );
        assert_eq!(problem.unwrap().batch, 2);
    }

    #[test]
    fn small_is_decided_per_key_of_rows_rounded_up() {
        let problem = |x: &[usize], w: &[usize]| {
            check_linear((x, DType::BF16), (w, DType::BF16), None).unwrap()
        };
        // [5, 9] rows: 45, key 64; 2 · 64 · 32 · 64 FLOPs.
        let encoder = problem(&[5, 9, 32], &[32, 64]);
        assert_eq!(encoder.key_rows(), 64);
        assert!(encoder.is_small());
        // 2^24 FLOPs exactly is not small; one row fewer in the key is.
        assert!(!problem(&[256, 256], &[256, 128]).is_small());
        assert!(problem(&[128, 256], &[256, 128]).is_small());
        // Rows 129 share the key of 256, so they are not small either.
        assert!(!problem(&[129, 256], &[256, 128]).is_small());
        assert!(!problem(&[1024, 784], &[784, 2048]).is_small());
    }

    #[test]
    fn rejects_what_the_kernel_cannot_run() {
        let err = check_linear((&[3, 4], DType::F32), (&[5, 6], DType::F32), None).unwrap_err();
        assert_eq!(err.key(), "incompatible-shapes");
        let err = check_linear(
            (&[3, 4], DType::F32),
            (&[4, 6], DType::F32),
            Some((&[2, 6], DType::F32)),
        )
        .unwrap_err();
        assert_eq!(err.key(), "incompatible-shapes");
        let err = check_linear((&[3, 4], DType::F64), (&[4, 6], DType::F64), None).unwrap_err();
        assert_eq!(err.key(), "unsupported-dtype");
        let err = check_linear((&[0, 4], DType::F32), (&[4, 6], DType::F32), None).unwrap_err();
        assert_eq!(err.key(), "empty");
    }
}

//! Hopper's tensor cores at full rate: a hand-written `wgmma` kernel with TMA loads and the
//! bias + activation epilogue in registers, launched through CubeCL's CUDA runtime.
//!
//! CubeCL 0.10 lowers matrix ops to `mma.sync`/`wmma` only, which caps cubek-matmul near a
//! third of an H100's bf16 peak (`examples/matmul_strategies`). Hopper's full rate needs the
//! asynchronous warpgroup MMA (`wgmma.mma_async`) fed from swizzled shared memory by TMA. So this
//! one kernel is CUDA C++ ([`wgmma_linear.cu`](../../../src/kernel/hopper/wgmma_linear.cu)),
//! handed to CubeCL through `kernel::cuda`: CubeCL compiles it with NVRTC (for `sm_90a`),
//! caches it, encodes the TMA descriptors and launches it on its own stream with its own
//! memory, like any of its kernels. It is one more candidate of the
//! [tensor-core engine's](crate::kernel::engine) autotune, so it runs only where it measured
//! fastest.
//!
//! Runs: f16 and bf16 (f32 accumulation), and f32 as TF32 (what Burn's f32 matmul computes on
//! tensor cores); `x` row-major (any rank, rows flattened) or a transposed `[k, m]` matrix (a
//! weight gradient's `xᵀ`), `w` a `[k, n]` matrix stored row-major (Burn's Linear weight) or
//! transposed (`[n, k]` storage), `k` and `n` multiples of 8 (TMA's 16-byte strides), 16-byte
//! aligned operands, a contiguous bias and gate. Anything else is declined with a reason and
//! another candidate runs. TF32 `wgmma` reads both operands K-major only, so an f32 operand in
//! another layout is first copied K-major (`transpose`), inside the launch that the engine's
//! autotune times (decision record 0001); a weight read again keeps its copy (`copies`,
//! decision record 0009).
mod copies;
mod source;
mod transpose;
mod wgmma_tiling;

pub use copies::{forget, kept_bytes};
pub use source::{KERNEL_SOURCE, WgmmaElem, WgmmaSource};
pub use wgmma_tiling::*;

use crate::kernel::cuda::launch_source;
use crate::kernel::{LinearArgs, bool_gate_bytes, is_aligned, is_contiguous};
use burn_backend::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::features::Tma;
use cubecl::prelude::*;
use cubecl::server::{KernelArguments, MetadataBindingInfo, TensorMapBinding, TensorMapMeta};
use cubecl::zspace::metadata::Metadata;
use wgmma_tiling::ROW_BYTES;

/// Whether the device runs `sm_90a` code (Hopper: TMA without Blackwell's additions).
pub fn supported<R: Runtime>(client: &ComputeClient<R>) -> bool {
    let tma = &client.properties().features.tma;
    tma.contains(Tma::Base) && !tma.contains(Tma::Im2colWide)
}

/// A TMA map of `tensor` as a `rows × cols` matrix whose rows are `pitch` elements apart.
fn tensor_map<R: CubeRuntime>(
    tensor: &CubeTensor<R>,
    [rows, cols, pitch]: [usize; 3],
    tile: [usize; 2],
) -> TensorMapBinding {
    TensorMapBinding {
        binding: tensor.handle.clone().binding(),
        map: TensorMapMeta {
            format: TensorMapFormat::Tiled(TiledArgs {
                tile_size: tile.to_vec().into(),
            }),
            metadata: Metadata::new(vec![rows, cols], vec![pitch, 1]),
            elem_stride: vec![1, 1].into(),
            interleave: TensorMapInterleave::None,
            swizzle: TensorMapSwizzle::B128,
            prefetch: TensorMapPrefetch::B256,
            oob_fill: OobFill::Zero,
            storage_ty: tensor.dtype.into(),
        },
    }
}

/// The distance between consecutive rows of `x` viewed as a `[rows, k]` matrix (leading dims
/// flattened): `None` unless `k` is unit-stride and the leading dims nest over the rows.
fn row_pitch(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let r = shape.len();
    if shape[r - 1] > 1 && strides[r - 1] != 1 {
        return None;
    }
    let pitch = match shape[r - 2] {
        1 => shape[r - 1],
        _ if strides[r - 2] < shape[r - 1] => return None,
        _ => strides[r - 2],
    };
    let mut expected = pitch * shape[r - 2];
    for i in (0..r - 2).rev() {
        if shape[i] > 1 && strides[i] != expected {
            return None;
        }
        expected *= shape[i];
    }
    Some(pitch)
}

/// The distance between consecutive columns of `x` viewed as an `[m, k]` matrix stored
/// transposed (`[k, m]` row-major, possibly pitched): `None` unless every leading dim is 1,
/// `m` is unit-stride and the columns do not overlap.
fn column_pitch(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let r = shape.len();
    let (m, k) = (shape[r - 2], shape[r - 1]);
    if shape[..r - 2].iter().any(|&d| d != 1) || (m > 1 && strides[r - 2] != 1) {
        return None;
    }
    match k {
        1 => Some(m.next_multiple_of(8)),
        _ if strides[r - 1] < m => None,
        _ => Some(strides[r - 1]),
    }
}

/// Runs `args` with `tiling`, or says why this kernel does not apply (nothing launched then).
pub fn launch<R: CubeRuntime>(tiling: WgmmaTiling, args: &LinearArgs<R>) -> Result<(), String> {
    let client = &args.x.client;
    if !supported(client) {
        return Err("needs an sm_90 device".into());
    }
    let elem = WgmmaElem::of(args.x.dtype).ok_or(format!("{:?} has no wgmma", args.x.dtype))?;
    if !tiling.runs(elem.size()) {
        return Err(format!("{} does not fit {:?}", tiling.name(), args.x.dtype));
    }
    let x_shape = args.x.meta.shape();
    let (w_shape, w_strides) = (args.w.meta.shape(), args.w.meta.strides());
    let k = x_shape[x_shape.len() - 1];
    let m: usize = x_shape[..x_shape.len() - 1].iter().product();
    let rank = w_shape.len();
    let n = w_shape[rank - 1];
    if w_shape[..rank - 2].iter().any(|&d| d != 1) {
        return Err("batched weight".into());
    }
    let (a_m_major, x_pitch) = match row_pitch(x_shape, args.x.meta.strides()) {
        Some(pitch) => (false, pitch),
        None => (
            true,
            column_pitch(x_shape, args.x.meta.strides())
                .ok_or("x is neither rows of k nor a transposed [k, m] matrix")?,
        ),
    };
    // Rows may be padded (CubeCL pitches allocations): TMA takes any 16-byte row pitch.
    let (b_k_major, w_pitch) = match (w_strides[rank - 2], w_strides[rank - 1]) {
        (s, 1) if s >= n => (false, s),
        (1, s) if s >= k => (true, s),
        _ => return Err("w is neither [k, n] nor [n, k] with unit stride".into()),
    };
    if k == 0 || !k.is_multiple_of(8) || !n.is_multiple_of(8) {
        return Err(format!("k = {k} and n = {n} must be multiples of 8"));
    }
    if !x_pitch.is_multiple_of(8) || !w_pitch.is_multiple_of(8) {
        return Err("row pitch not a multiple of 16 bytes".into());
    }
    if !is_aligned(&args.x) || !is_aligned(&args.w) || !is_aligned(&args.out) {
        return Err("operands not 16-byte aligned".into());
    }
    if args.epilogue.gated() != args.gate.is_some() {
        return Err("a gate goes with a backward epilogue".into());
    }
    if args.epilogue.masked() != args.mask.is_some() {
        return Err("a mask goes with dropout's, SiLU's, SwiGLU's or tanh GELU's backward".into());
    }
    if args.epilogue.has_aux() != args.aux.is_some() {
        return Err("an aux operand goes with tanh GELU's backward or SwiGLU".into());
    }
    for (what, tensor) in [
        ("gate", &args.gate),
        ("mask", &args.mask),
        ("aux", &args.aux),
    ] {
        if let Some(t) = tensor
            && !is_contiguous(t.meta.shape(), t.meta.strides())
        {
            return Err(format!("{what} is strided"));
        }
    }
    // A bool gate (LeakyReLU's mask) is read from global memory, never staged.
    let bool_gate_bytes = match args.gate.as_ref().map(|g| g.dtype) {
        Some(dtype @ DType::Bool(_)) => bool_gate_bytes(dtype)
            .ok_or_else(|| "a native bool gate has no integer to read".to_string())?,
        _ => 0,
    };
    let staged_gate = args.gate.as_ref().filter(|_| bool_gate_bytes == 0);
    if args.epilogue.gate().is_bool() != (bool_gate_bytes != 0) {
        return Err("a bool gate goes with LeakyReLU's backward".into());
    }
    if tiling.tma_store {
        if args.pre.is_some() && staged_gate.is_some() {
            return Err("pre and a gate share one staging buffer".into());
        }
        if !args.pre.iter().chain(staged_gate).all(|t| is_aligned(t)) {
            return Err("pre or gate not 16-byte aligned".into());
        }
    }
    if let Some(bias) = &args.bias
        && bias.meta.strides().last() != Some(&1)
    {
        return Err("bias is strided".into());
    }
    if m * n >= u32::MAX as usize {
        return Err("output larger than 32-bit indexing".into());
    }
    // TF32 wgmma reads K-major operands only: copy the others K-major first.
    let tf32 = elem == WgmmaElem::Tf32;
    let (x, a_m_major, x_pitch) = match tf32 && a_m_major {
        true => (transpose::transposed(&args.x, [k, m, x_pitch])?, false, k),
        false => (args.x.clone(), a_m_major, x_pitch),
    };
    let (w, b_k_major, w_pitch) = match tf32 && !b_k_major {
        true => (
            copies::k_major(
                &args.w,
                args.w_id,
                [k, n, w_pitch],
                args.choices.weight_copies,
            )?,
            true,
            k,
        ),
        false => (args.w.clone(), b_k_major, w_pitch),
    };
    // Persistent: one CTA per SM (fewer when there are fewer tiles).
    let bm = tiling.rows as usize;
    let tiles = n.div_ceil(tiling.bn as usize) * m.div_ceil(bm);
    let sms = client
        .properties()
        .hardware
        .num_streaming_multiprocessors
        .unwrap_or(132) as usize;
    let ctas = if tiling.persistent {
        tiles.min(sms)
    } else {
        tiles
    };

    let config = WgmmaSource {
        tiling,
        elem,
        a_m_major,
        b_k_major,
        activation: args.epilogue.activation(),
        gate: args.epilogue.gate(),
        dropout: args.epilogue.dropout(),
        product: args.epilogue.product(),
        bool_gate_bytes,
    };
    let bn = tiling.bn as usize;
    // Elements per 128-byte row: a stage's depth along k, a staged output box's width.
    let bk = ROW_BYTES / elem.size();
    let mut kernel_args = KernelArguments::new();
    kernel_args.tensor_maps.push(if a_m_major {
        tensor_map(&x, [k, m, x_pitch], [bk, 64])
    } else {
        tensor_map(&x, [m, k, x_pitch], [bm, bk])
    });
    kernel_args.tensor_maps.push(if b_k_major {
        tensor_map(&w, [n, k, w_pitch], [bn, bk])
    } else {
        tensor_map(&w, [k, n, w_pitch], [bk, 64])
    });
    kernel_args
        .tensor_maps
        .push(tensor_map(&args.out, [m, n, n], [64, bk]));
    if tiling.tma_store {
        // pre and the gate move through the output's staging buffer, in its layout.
        for tensor in [args.pre.as_ref(), staged_gate] {
            let tensor = tensor.unwrap_or(&args.out);
            kernel_args
                .tensor_maps
                .push(tensor_map(tensor, [m, n, n], [64, bk]));
        }
    }
    // The bias gradient's partial rows: one per 16 output rows (see the kernel's epilogue).
    let partial_rows = m.div_ceil(bm) * (bm / 16);
    let partials = args.bias_grad.as_ref().map(|_| {
        let like: burn_cubecl_fusion::CubeFusionHandle<R> = args.out.clone().into();
        crate::kernel::alloc(&like, &[partial_rows, n], DType::F32)
    });
    let out = args.out.handle.clone();
    kernel_args.buffers = vec![
        args.bias
            .as_ref()
            .map_or(out.clone(), |b| b.handle.clone())
            .binding(),
        args.pre
            .as_ref()
            .map_or(out.clone(), |p| p.handle.clone())
            .binding(),
        args.gate
            .as_ref()
            .map_or(out.clone(), |g| g.handle.clone())
            .binding(),
        args.mask
            .as_ref()
            .map_or(out.clone(), |m| m.handle.clone())
            .binding(),
        args.aux
            .as_ref()
            .map_or(out.clone(), |a| a.handle.clone())
            .binding(),
        partials
            .as_ref()
            .map_or(out, |p| p.handle.clone())
            .binding(),
    ];
    let flags = args.bias.is_some() as u64
        | (args.pre.is_some() as u64) << 1
        | (args.epilogue.gated() as u64) << 3
        | (partials.is_some() as u64) << 4;
    // `Params { m, n, k, flags, alpha, beta }` as six 32-bit words, passed by value (no
    // dynamic metadata).
    let [alpha, beta] = args.params.map(|p| p.to_bits() as u64);
    let data = vec![
        m as u64 | (n as u64) << 32,
        k as u64 | flags << 32,
        alpha | beta << 32,
    ];
    kernel_args.info = MetadataBindingInfo::new(data, 3);

    launch_source(client, config, ctas as u32, kernel_args)?;
    if let (Some(partials), Some(bias_grad)) = (&partials, &args.bias_grad) {
        crate::kernel::sum_rows(partials, partial_rows, n, &bias_grad.clone().into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Activation;

    /// A bf16 configuration with `x` row-major.
    fn bf16_config(tiling: WgmmaTiling, b_k_major: bool, activation: Activation) -> WgmmaSource {
        WgmmaSource {
            tiling,
            elem: WgmmaElem::Bf16,
            a_m_major: false,
            b_k_major,
            activation,
            gate: crate::kernel::Gate::None,
            dropout: false,
            product: false,
            bool_gate_bytes: 0,
        }
    }

    #[test]
    fn source_has_one_operand_per_accumulator() {
        let source = bf16_config(WGMMA_TILINGS[0], false, Activation::Relu).source();
        assert!(source.contains("m64n256k16.f32.bf16.bf16"));
        assert!(source.contains("\"+f\"(d[127])") && !source.contains("\"+f\"(d[128])"));
        assert!(
            source.contains("p, 1, 1, 0, 1;"),
            "w [k, n] is operand B transposed"
        );
        assert!(source.contains("#define B_K_MAJOR 0"));
    }

    #[test]
    fn pingpong_tilings_give_each_consumer_whole_tiles() {
        let all = || WGMMA_TILINGS.into_iter().chain(WGMMA_FORCED_TILINGS);
        for tiling in all() {
            // A cooperative tile is the two consumers' 64 rows; a ping-pong consumer's tiles
            // alternate over the CTA's persistent walk.
            let rows_ok = match tiling.pingpong {
                false => tiling.rows == 128,
                true => tiling.persistent && matches!(tiling.rows, 64 | 128),
            };
            assert!(rows_ok, "{tiling:?}");
        }
        let pingpong = all().find(|t| t.pingpong && t.rows == 128).unwrap();
        let source = bf16_config(pingpong, true, Activation::None).source();
        assert!(source.contains("#define PINGPONG 1\n#define MH 2"));
        assert!(source.contains("m64n192k16.f32.bf16.bf16"));
        assert_eq!(
            pingpong.name(),
            "wgmma pingpong 128x192 s4 g16 persistent tma-store"
        );
        let cooperative = bf16_config(WGMMA_TILINGS[0], true, Activation::None);
        assert!(!cooperative.source().contains("#define PINGPONG 1"));
    }

    #[test]
    fn row_pitch_flattens_nested_leading_dims_only() {
        assert_eq!(row_pitch(&[4, 8], &[8, 1]), Some(8));
        assert_eq!(row_pitch(&[4, 8], &[16, 1]), Some(16), "pitched rows");
        assert_eq!(row_pitch(&[2, 3, 8], &[48, 16, 1]), Some(16));
        assert_eq!(row_pitch(&[2, 3, 8], &[64, 16, 1]), None, "batch gap");
        assert_eq!(row_pitch(&[4, 8], &[1, 4]), None, "transposed");
        assert_eq!(row_pitch(&[4, 8], &[4, 1]), None, "overlapping rows");
        assert_eq!(row_pitch(&[3, 1, 8], &[8, 8, 1]), Some(8));
    }

    #[test]
    fn column_pitch_reads_transposed_matrices_only() {
        assert_eq!(column_pitch(&[8, 4], &[1, 8]), Some(8), "xᵀ of a [4, 8] x");
        assert_eq!(column_pitch(&[1, 8, 4], &[32, 1, 8]), Some(8));
        assert_eq!(column_pitch(&[8, 4], &[1, 16]), Some(16), "pitched");
        assert_eq!(column_pitch(&[8, 4], &[4, 1]), None, "row-major");
        assert_eq!(column_pitch(&[2, 8, 4], &[32, 1, 8]), None, "batched");
        assert_eq!(column_pitch(&[8, 4], &[1, 4]), None, "overlapping columns");
    }

    #[test]
    fn shared_memory_fits_a_hopper_sm() {
        for tiling in WGMMA_TILINGS.into_iter().chain(WGMMA_FORCED_TILINGS) {
            assert!(tiling.runs(2), "{tiling:?}");
        }
        for tiling in WGMMA_TF32_TILINGS {
            assert!(tiling.runs(4), "{tiling:?}");
        }
        // The widest tuned tilings stage too much for f32; the TF32 list stands in for them.
        assert!(!WGMMA_TILINGS[0].runs(4) && WGMMA_TILINGS[1].runs(4));
    }

    #[test]
    fn tf32_source_reads_k_major_operands_in_k8_steps() {
        let config = WgmmaSource {
            elem: WgmmaElem::Tf32,
            ..bf16_config(WGMMA_TF32_TILINGS[0], true, Activation::Relu)
        };
        let source = config.source();
        assert!(source.contains("m64n256k8.f32.tf32.tf32"));
        assert!(source.contains("p, 1, 1; }"), "no transpose operands");
        assert!(source.contains("#define ESIZE 4\n"));
        assert!(source.contains("#define ELEM float\n"));
    }

    #[test]
    fn staged_stores_divide_the_tile_into_whole_boxes() {
        let all = WGMMA_TILINGS
            .into_iter()
            .chain(WGMMA_FORCED_TILINGS)
            .chain(WGMMA_TF32_TILINGS);
        for tiling in all {
            let cols = tiling.store_cols;
            assert!(cols % 32 == 0 && tiling.bn % cols == 0, "{tiling:?}");
            assert!(tiling.tma_store || cols == tiling.bn, "{tiling:?}");
        }
        assert_eq!(
            WGMMA_TILINGS[0].name(),
            "wgmma 128x256 s4 g16 persistent tma-store/128"
        );
        assert_eq!(
            WGMMA_FORCED_TILINGS[0].name(),
            "wgmma 128x256 s3 g16 persistent tma-store"
        );
    }
}

//! The MLP chain on CUDA: every layer spread over the whole GPU, one launch.
//!
//! The portable chain kernel gives each block of rows one cube, so at batch 1 one SM streams
//! every weight: 1.3 MB for 784→512→512→10, ~80 µs on an H100 (ncu: latency-bound, 1% of
//! peak memory throughput). Spreading a layer over many SMs inside one launch needs a
//! grid-wide barrier between layers with a device-scope fence, which CubeCL 0.10's frontend
//! lacks. So this kernel is CUDA C++ ([`grid_chain.cu`](../../../../src/kernel/chain/grid_chain.cu)),
//! handed to CubeCL like the [Hopper kernel](crate::kernel::hopper):
//!
//! - a work item is up to 8 rows × one 16-byte vector of a layer's output columns; each of a
//!   block's 256 threads takes a slice of `k`, and the block reduces the slices. From
//!   [`GRID_MMA_MIN_M`](crate::kernel::GRID_MMA_MIN_M) rows on, bf16 and f16 items on sm_80+ are 16 or
//!   32 rows × 8 columns on tensor cores instead (`mma.sync` m16n8k16 fed by `ldmatrix` from a
//!   shared-memory copy of the item's inputs and weights; [`grid_item`]);
//! - the blocks (at most one per SM) claim items from a counter per layer, and a layer's
//!   items start once the previous layer's are all counted done. A block waits only while
//!   it holds no unfinished earlier item, so a launch completes even when other streams'
//!   kernels keep some of its blocks from being resident (no co-residency is assumed, unlike
//!   a plain grid barrier); the last block to finish resets the counters;
//! - hidden activations go through a scratch buffer in global memory (L2), rounded to the
//!   storage type as Burn's per-layer path stores them.
//!
//! It takes every chain [`check_chain`](crate::kernel::check_chain) accepts.

use crate::kernel::cuda::{CudaSource, Preamble, is_cuda, launch_source, pack_words};
use crate::kernel::{
    Activation, ChainLayer, ChainProblem, LinearOutputs, OperandRef, alloc, grid_item,
};
use burn_backend::DType;
use cubecl::features::Plane;
use cubecl::prelude::*;
use cubecl::server::{Handle, KernelArguments, MetadataBindingInfo};
use std::cell::RefCell;
use std::collections::HashMap;

/// The kernel's text, without its configuration.
pub const KERNEL_SOURCE: &str = include_str!("grid_chain.cu");
const THREADS: u32 = 256;

/// One configuration of the kernel: everything that changes its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GridSource {
    /// Element type of every operand.
    pub dtype: DType,
    /// Layers (1 to 4).
    pub layers: usize,
    /// Columns per work item, per layer (one vector load of at most 16 bytes).
    pub vector: [usize; 4],
    /// Each layer's activation (ReLU or none).
    pub activation: [Activation; 4],
    /// Whether each layer adds a bias.
    pub bias: [bool; 4],
    /// Rows per work item.
    pub rows: usize,
    /// Tensor-core items (see [`GridItem::mma`](crate::kernel::GridItem::mma)).
    pub mma: bool,
    /// Tensor-core items: the widest layer input rounded up to 16 (the k rows whose weights
    /// each thread loads, and the row length of the shared-memory tile); 0 otherwise.
    pub kp: usize,
}

impl GridSource {
    /// Dynamic shared memory of a tensor-core launch: the item's input rows (padded rows of
    /// `kp + 8`), its weight columns and the warps' partial tiles (the kernel's `MMA_X_BYTES`,
    /// `MMA_W_BYTES` and `red`).
    fn mma_bytes(rows: usize, kp: usize) -> usize {
        rows * (kp + 8) * 2 + kp * 16 + (THREADS as usize / 32) * rows * 8 * 4
    }
}

impl CudaSource for GridSource {
    const ENTRY_POINT: &'static str = "hypatia_grid_chain";
    const DEBUG_NAME: &'static str = "hypatia::kernel::chain::grid";

    fn threads(&self) -> u32 {
        THREADS
    }

    /// FMA items reduce in static shared memory; tensor-core items stage their tiles in
    /// dynamic shared memory.
    fn shared_bytes(&self) -> usize {
        match self.mma {
            true => Self::mma_bytes(self.rows, self.kp),
            false => 0,
        }
    }

    fn source(&self) -> String {
        GridSource::source(self)
    }
}

impl GridSource {
    /// The CUDA source of this configuration: the shared header, its `#define`s, the kernel.
    pub fn source(&self) -> String {
        self.source_with(KERNEL_SOURCE)
    }

    /// The same with `kernel` in place of the crate's `grid_chain.cu` (a benchmark comparing
    /// an edited copy).
    pub fn source_with(&self, kernel: &str) -> String {
        let (elem, to_f32, from_f32) = match self.dtype {
            DType::BF16 => ("__nv_bfloat16", "__bfloat162float", "__float2bfloat16_rn"),
            DType::F16 => ("__half", "__half2float", "__float2half_rn"),
            _ => ("float", "", ""),
        };
        let mut preamble = Preamble::new()
            .define("ELEM", elem)
            .define("TO_F32(v)", format_args!("{to_f32}(v)"))
            .define("FROM_F32(v)", format_args!("{from_f32}(v)"))
            .define("LOAD_X(p)", "__ldg(p)")
            .define("ROWS", self.rows)
            .define("MMA", self.mma as u32);
        if self.mma {
            let ptx = if self.dtype == DType::F16 {
                "f16"
            } else {
                "bf16"
            };
            preamble = preamble.define("MMA_TYPE", ptx).define("KP", self.kp);
        }
        preamble = preamble.define("LAYERS", self.layers);
        for i in 0..4 {
            let act = match self.activation[i] {
                Activation::Relu => Activation::Relu.code(),
                _ => Activation::None.code(),
            };
            preamble = preamble
                .define(&format!("VEC{i}"), self.vector[i])
                .define(&format!("ACT{i}"), act)
                .define(&format!("BIAS{i}"), self.bias[i] as u32);
        }
        preamble.finish(kernel)
    }
}

/// Whether `R` is CubeCL's CUDA runtime on a device with what the kernel needs (sm_70+:
/// `__nanosleep`, parameters passed by value).
pub fn supported<R: Runtime>(client: &ComputeClient<R>) -> bool {
    is_cuda::<R>() && client.properties().features.plane.contains(Plane::Sync)
}

/// Whether `client`'s device has `dtype`'s m16n8k16 tensor-core product with f32 accumulators
/// (sm_80 or later), which the kernel's tensor-core items use.
fn has_mma<R: Runtime>(client: &ComputeClient<R>, dtype: DType) -> bool {
    let ty: StorageType = dtype.into();
    let f32: StorageType = DType::F32.into();
    (client.properties().features.matmul.mma.iter()).any(|c| {
        c.a_type == ty && c.b_type == ty && c.cd_type == f32 && (c.m, c.n, c.k) == (16, 8, 16)
    })
}

/// One thread's buffers for its launches on one device. Per thread because CubeCL gives each
/// thread its own stream: its launches run one after the other, while two launches from two
/// threads may run at once and must not share them.
struct ThreadBuffers {
    /// The work counters (`NEXT`, `DONE` and `EXITED` in the kernel): zeroed once, left
    /// zeroed by every launch.
    counters: Handle,
    /// The hidden activations, the largest any launch asked for so far: reused, not allocated
    /// per launch (stream order keeps one launch's use from overlapping the next's).
    scratch: Handle,
}

thread_local! {
    static BUFFERS: RefCell<HashMap<(u16, u16), ThreadBuffers>> = RefCell::new(HashMap::new());
}

/// This thread's counters and a scratch buffer of at least `bytes` on `client`'s `device`.
fn thread_buffers<R: Runtime>(
    client: &ComputeClient<R>,
    device: cubecl::device::DeviceId,
    bytes: usize,
) -> (Handle, Handle) {
    BUFFERS.with(|buffers| {
        let mut buffers = buffers.borrow_mut();
        let entry = buffers
            .entry((device.type_id, device.index_id))
            .or_insert_with(|| ThreadBuffers {
                counters: client.create_from_slice(&[0u8; 64]),
                scratch: client.empty(bytes),
            });
        if (entry.scratch.size() as usize) < bytes {
            entry.scratch = client.empty(bytes);
        }
        (entry.counters.clone(), entry.scratch.clone())
    })
}

/// Runs a chain that [`check_chain`](crate::kernel::check_chain) accepted into a new contiguous
/// output, or says why this kernel cannot (nothing launched then).
pub fn launch<R: Runtime>(
    problem: &ChainProblem,
    x: OperandRef<'_, R>,
    layers: &[ChainLayer<'_, R>],
) -> Result<LinearOutputs<R>, String> {
    let client = x.handle.client.clone();
    if !supported(&client) {
        return Err("not CUDA on sm_70 or later".into());
    }
    let count = layers.len();
    if count == 0 || count > 4 || problem.widths.len() != count + 1 {
        return Err("one to four layers".into());
    }
    let size = problem.dtype.size();
    let m = problem.m;
    let mut item = grid_item(m, problem.dtype, has_mma(&client, problem.dtype));
    let kp = problem.widths[..count]
        .iter()
        .max()
        .map_or(16, |k| k.next_multiple_of(16));
    let max_shared = client.properties().hardware.max_shared_memory_size;
    if item.mma && GridSource::mma_bytes(item.rows, kp) > max_shared {
        item = grid_item(m, problem.dtype, false);
    }
    let mut config = GridSource {
        dtype: problem.dtype,
        layers: count,
        vector: [1; 4],
        activation: [Activation::None; 4],
        bias: [false; 4],
        rows: item.rows,
        mma: item.mma,
        kp: if item.mma { kp } else { 0 },
    };
    let rows = item.rows;
    let mut items = 0;
    let mut w_row = [0u32; 4];
    for (i, layer) in layers.iter().enumerate() {
        let r = layer.w.handle.strides.len();
        if layer.w.handle.strides[r - 1] != 1
            || layer
                .bias
                .is_some_and(|b| b.handle.strides.last().is_some_and(|&s| s != 1))
        {
            return Err("weight rows and biases must be contiguous".into());
        }
        config.vector[i] = super::vector_for(std::slice::from_ref(layer), item.columns, size);
        config.activation[i] = layer.epilogue.activation();
        config.bias[i] = layer.bias.is_some();
        w_row[i] = layer.w.handle.strides[r - 2] as u32;
        let groups = match item.mma {
            true => problem.widths[i + 1].div_ceil(item.columns),
            false => problem.widths[i + 1] / config.vector[i],
        };
        items = items.max(groups * m.div_ceil(rows));
    }
    let sms = client
        .properties()
        .hardware
        .num_streaming_multiprocessors
        .unwrap_or(1) as usize;
    let blocks = items.clamp(1, sms.max(1));

    let rank = x.shape.len();
    let x_strides = &x.handle.strides;
    let x_row = super::row_stride(x);
    let hidden = problem.widths[1..count].iter().copied().max().unwrap_or(1);
    let out = alloc(x.handle, &problem.out_shape, problem.dtype);
    let device = cubecl::device::Device::to_id(&x.handle.device);
    let (counter, scratch) = thread_buffers(&client, device, (2 * m * hidden).max(1) * size);

    let mut words = vec![
        m as u32,
        x_row as u32,
        x_strides[rank - 1] as u32,
        hidden as u32,
    ];
    let (mut k, mut n) = ([0u32; 4], [0u32; 4]);
    for i in 0..count {
        k[i] = problem.widths[i] as u32;
        n[i] = problem.widths[i + 1] as u32;
    }
    words.extend(k);
    words.extend(n);
    words.extend(w_row);
    // `Params` by value.
    let data = pack_words(&words);

    let mut args = KernelArguments::new();
    let mut buffers = vec![x.handle.handle.clone().binding()];
    for i in 0..4 {
        let layer = layers.get(i).unwrap_or(&layers[0]);
        buffers.push(layer.w.handle.handle.clone().binding());
        let bias = layer.bias.unwrap_or(layer.w);
        buffers.push(bias.handle.handle.clone().binding());
    }
    buffers.push(out.handle.clone().binding());
    buffers.push(scratch.binding());
    buffers.push(counter.binding());
    args.buffers = buffers;
    let len = data.len();
    args.info = MetadataBindingInfo::new(data, len);

    launch_source(&client, config, blocks as u32, args)?;
    Ok(LinearOutputs {
        bias_grad: None,
        out,
        pre: None,
        shape: problem.out_shape.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_defines_every_layer_macro() {
        let config = GridSource {
            dtype: DType::BF16,
            layers: 3,
            vector: [8, 8, 2, 1],
            activation: [
                Activation::Relu,
                Activation::Relu,
                Activation::None,
                Activation::None,
            ],
            bias: [true, false, true, false],
            rows: 4,
            mma: false,
            kp: 0,
        };
        let source = config.source();
        for line in [
            "#define ELEM __nv_bfloat16",
            "#define LAYERS 3",
            "#define VEC2 2",
            "#define ACT1 1",
            "#define ACT2 0",
            "#define BIAS1 0",
            "#define ROWS 4",
        ] {
            assert!(source.contains(line), "{line}");
        }
        let f32 = GridSource {
            dtype: DType::F32,
            ..config
        };
        assert!(f32.source().contains("#define TO_F32(v) (v)"));
        // The macros the host prepends, before the kernel's own text.
        let macros = &source[..source.len() - KERNEL_SOURCE.len()];
        assert!(macros.contains("#define MMA 0"));
        assert!(!macros.contains("MMA_TYPE") && !macros.contains("#define KP"));
        assert_eq!(config.shared_bytes(), 0);
    }

    #[test]
    fn tensor_core_items_define_their_type_and_tile() {
        let config = GridSource {
            dtype: DType::F16,
            layers: 2,
            vector: [8, 2, 1, 1],
            activation: [
                Activation::Relu,
                Activation::None,
                Activation::None,
                Activation::None,
            ],
            bias: [true, true, false, false],
            rows: 32,
            mma: true,
            kp: 784,
        };
        let source = config.source();
        for line in [
            "#define MMA 1",
            "#define MMA_TYPE f16",
            "#define KP 784",
            "#define ROWS 32",
        ] {
            assert!(source.contains(line), "{line}");
        }
        // 32 rows of 792, 784 weight rows of 16 bytes, 8 warps' 32 × 8 partial tiles.
        assert_eq!(
            config.shared_bytes(),
            32 * 792 * 2 + 784 * 16 + 8 * 32 * 8 * 4
        );
    }
}

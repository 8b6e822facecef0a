//! The MLP-chain kernel: up to [`MAX_CHAIN_LAYERS`] Linear layers in one launch, the hidden
//! activations kept in shared memory.
//!
//! Small-batch inference of a small MLP is bound by launches and host time, not by FLOPs: at
//! batch 1 a 784→512→512→10 forward is 0.7 MFLOP and 1.3 MB of bf16 weights. One cube per
//! block of [`ChainFlags::rows`] rows runs every layer: it stages its input rows in shared
//! memory, and for each layer and each pass of [`CHAIN_COLS`](crate::kernel::CHAIN_COLS) column vectors (up to 16 bytes of
//! weights each, read along `n`) its units split the `k` loop into `units / CHAIN_COLS`
//! slices, keep [`CHAIN_UNROLL`](crate::kernel::CHAIN_UNROLL) vector loads in flight, sum the slices' partials through
//! shared memory, add the bias, apply the activation, round to the storage type (as Burn's
//! layer-by-layer path stores each hidden tensor) and write the next layer's input into the
//! other shared buffer. Only the last layer writes global memory.
//!
//! ```text
//!  x rows --stage--> h_a --layer 0--> h_b --layer 1--> h_a ... --last layer--> out
//!            (shared, storage type, rows x width each; weights and biases from global memory)
//! ```
//!
//! The bounds ([`check_chain`](crate::kernel::check_chain)) keep the buffers within the device's shared memory (48 KiB at
//! most). One SM streams every weight, so this kernel wins only where launches cost more than
//! that stream: narrow layers at small batch (decision record 0005). On CUDA the same chains run on the grid-wide
//! kernel instead (module `grid`, CUDA C++): each layer spread over every SM, the layers
//! separated by a grid-wide wait, which CubeCL's own frontend cannot express.
//! [`choose_chain`](crate::execute::choose_chain) predicts either from the device's
//! [`Profile`](crate::rewrite::Profile), and a chain it declines runs layer by layer.

#[cfg(feature = "cuda")]
pub mod grid;

mod portable;

pub use portable::{ChainFlags, mlp_chain_kernel};

use crate::kernel::{
    Activation, ChainLayer, ChainLimits, ChainProblem, LinearOutputs, MAX_CHAIN_LAYERS,
    MAX_CHAIN_SHARED, OperandRef, alloc,
};
use burn_backend::Shape;
use burn_std::Strides;
use cubecl::prelude::*;

impl ChainLimits {
    /// The limits of `client`'s device.
    pub fn of<R: Runtime>(client: &ComputeClient<R>) -> Self {
        let hardware = &client.properties().hardware;
        let gpu = hardware.num_streaming_multiprocessors.is_some();
        let units = if gpu && hardware.max_units_per_cube >= 512 && hardware.max_cube_dim.0 >= 512 {
            512
        } else {
            256
        };
        Self {
            units,
            shared_bytes: hardware.max_shared_memory_size.min(MAX_CHAIN_SHARED),
            max_vector: hardware.max_vector_size.max(1),
            grid: Self::grid_kernel(client),
        }
    }

    #[cfg(feature = "cuda")]
    fn grid_kernel<R: Runtime>(client: &ComputeClient<R>) -> bool {
        grid::supported(client)
    }

    #[cfg(not(feature = "cuda"))]
    fn grid_kernel<R: Runtime>(_client: &ComputeClient<R>) -> bool {
        false
    }
}

/// The widest vector (at most `most` elements) that reads `layers` along `n`: it divides every
/// `n` and row stride, the weights and biases are contiguous along `n`, and every buffer starts
/// on a multiple of the vector's bytes.
fn vector_for<R: Runtime>(layers: &[ChainLayer<'_, R>], most: usize, size: usize) -> usize {
    let aligned = |operand: OperandRef<'_, R>, bytes: usize| {
        (operand.handle.handle.offset_start.unwrap_or(0) as usize).is_multiple_of(bytes)
    };
    let fits = |v: usize| {
        layers.iter().all(|layer| {
            let strides = &layer.w.handle.strides;
            let r = strides.len();
            let n = layer.w.shape[layer.w.shape.len() - 1];
            let bias_ok = layer.bias.is_none_or(|b| {
                b.handle.strides.last().is_none_or(|&s| s == 1) && aligned(b, v * size)
            });
            n % v == 0
                && strides[r - 1] == 1
                && strides[r - 2] % v == 0
                && aligned(layer.w, v * size)
                && bias_ok
        })
    };
    [8, 4, 2, 1]
        .into_iter()
        .find(|&v| v <= most && fits(v))
        .unwrap_or(1)
}

/// The distance between the rows of `x` ([`check_chain`](crate::kernel::check_chain) accepted its layout): the stride of
/// the innermost leading dim that is not 1.
fn row_stride<R: Runtime>(x: OperandRef<'_, R>) -> usize {
    let rank = x.shape.len();
    (0..rank - 1)
        .rev()
        .find(|&i| x.shape[i] != 1)
        .map_or(0, |i| x.handle.strides[i])
}

/// Runs a chain that [`check_chain`](crate::kernel::check_chain) accepted with `limits` into a new contiguous output.
pub fn launch_mlp_chain<R: Runtime>(
    problem: &ChainProblem,
    limits: ChainLimits,
    x: OperandRef<'_, R>,
    layers: &[ChainLayer<'_, R>],
) -> LinearOutputs<R> {
    #[cfg(feature = "cuda")]
    if problem.grid {
        match grid::launch(problem, x, layers) {
            Ok(outputs) => return outputs,
            Err(reason) => {
                log::warn!("hypatia: grid-wide chain not run ({reason}): one cube per row block")
            }
        }
    }
    let out = alloc(x.handle, &problem.out_shape, problem.dtype);
    let client = x.handle.client.clone();
    let n_last = *problem.widths.last().expect("a chain has layers");
    let size = problem.dtype.size();
    let most = problem.max_vector(limits);
    let (hidden, last) = layers.split_at(layers.len() - 1);
    let vector_hidden = if hidden.is_empty() {
        1
    } else {
        vector_for(hidden, most, size)
    };
    let vector_last = vector_for(last, most, size);

    let view = |handle: &burn_cubecl_fusion::CubeFusionHandle<R>,
                shape: [usize; 2],
                strides: [usize; 2]| {
        let mut handle = handle.clone();
        handle.strides = Strides::new(&strides);
        handle.into_tensor_arg(Shape::from(shape.to_vec()))
    };
    let x_strides = &x.handle.strides;
    let rank = x.shape.len();
    let row_stride = row_stride(x);
    let x_arg = view(
        x.handle,
        [problem.m, problem.widths[0]],
        [row_stride, x_strides[rank - 1]],
    );
    let dummy = || alloc(x.handle, &[8], problem.dtype).into_tensor_arg(Shape::from(vec![8]));
    let mut flags = ChainFlags {
        layers: layers.len() as u32,
        bias: [false; MAX_CHAIN_LAYERS],
        activation: [Activation::None; MAX_CHAIN_LAYERS],
        width: problem.width() as u32,
        rows: problem.rows as u32,
        units: problem.units as u32,
        vector: vector_hidden.max(vector_last) as u32,
    };
    let mut args: Vec<(TensorArg<R>, TensorArg<R>)> = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        let (k, n) = (problem.widths[i], problem.widths[i + 1]);
        let s = &layer.w.handle.strides;
        let r = s.len();
        let w = view(layer.w.handle, [k, n], [s[r - 2], s[r - 1]]);
        let b = match layer.bias {
            Some(bias) => view(bias.handle, [n, 1], [1, 1]),
            None => dummy(),
        };
        flags.bias[i] = layer.bias.is_some();
        flags.activation[i] = layer.epilogue.activation();
        args.push((w, b));
    }
    let (wl, bl) = args.pop().expect("a chain has layers");
    while args.len() < MAX_CHAIN_LAYERS - 1 {
        args.push((dummy(), dummy()));
    }
    let mut args = args.into_iter();
    let mut next = || args.next().expect("padded");
    let ((w0, b0), (w1, b1), (w2, b2)) = (next(), next(), next());
    let out_arg = view(&out, [problem.m, n_last], [n_last, 1]);
    mlp_chain_kernel::launch::<R>(
        &client,
        CubeCount::Static(problem.cubes() as u32, 1, 1),
        CubeDim::new_1d(problem.units as u32),
        vector_hidden,
        vector_last,
        x_arg,
        w0,
        b0,
        w1,
        b1,
        w2,
        b2,
        wl,
        bl,
        out_arg,
        flags,
        problem.dtype.into(),
    );
    LinearOutputs {
        out,
        pre: None,
        bias_grad: None,
        shape: problem.out_shape.clone(),
    }
}

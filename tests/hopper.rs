//! The CUDA C++ kernels against a float64 host reference, on raw device buffers (no Burn
//! tensors, so no default-dtype lock).
//!
//! - The Hopper `wgmma` kernel: every tiling, bf16, f16 and f32 (TF32), odd and tile-sized shapes, k tails
//!   and pipeline wrap-around, rank-3 input, transposed weight, transposed input (a weight
//!   gradient `xᵀ·dy`), the ReLU, GELU and SiLU backward gates (SiLU's saved sigmoid and
//!   dropout's mask read as a second operand) and the plain epilogue, NaN/±Inf, poisoned
//!   outputs. On a device without `sm_90` it checks nothing and says so.
//! - The grid-wide MLP chain (any CUDA device): 1 to 4 layers, 1 to 64 rows, odd widths (one
//!   element per load), pitched and rank-3 input, with and without bias, NaN/±Inf.
//!
//! Built with `--features cuda`.
#![cfg(feature = "cuda")]

#[allow(dead_code)] // the shared helpers serve several binaries
#[path = "suite/common.rs"]
mod common;

use burn::backend::cuda::CudaDevice;
use burn_backend::{BoolStore, DType};
use burn_cubecl::tensor::CubeTensor;
use burn_std::{Metadata, Shape, Strides};
use common::serial;
use cubecl::cuda::CudaRuntime;
use cubecl::prelude::*;
use half::{bf16, f16};
use hypatia::kernel::chain::grid;
use hypatia::kernel::engine::LinearArgs;
use hypatia::kernel::hopper::{
    WGMMA_FORCED_TILINGS, WGMMA_TF32_TILINGS, WGMMA_TILINGS, WgmmaTiling, forget, kept_bytes,
    launch, supported,
};
use hypatia::kernel::{ChainLayer, ChainLimits, check_chain};
use hypatia::kernel::{EngineChoices, Epilogue, F32Math, Operand};

/// One problem: `x` of shape `lead ++ [m, k]`, `w` `[k, n]`.
#[derive(Clone, Copy, Debug)]
struct Case {
    lead: usize,
    m: usize,
    k: usize,
    n: usize,
    transpose_w: bool,
    bias: bool,
    pre: bool,
    specials: bool,
    /// Elements of padding after each row of `x`'s storage (a pitched allocation).
    x_pad: usize,
    /// `x` is a transposed view of `[k, m]` storage (rank 2 only).
    transpose_x: bool,
    /// What the epilogue applies; `ReluGrad` and `GeluGrad` read a gate with zeros and NaN
    /// in it.
    epilogue: Epilogue,
}

const fn case(m: usize, k: usize, n: usize) -> Case {
    Case {
        lead: 1,
        m,
        k,
        n,
        transpose_w: false,
        bias: true,
        pre: true,
        specials: false,
        x_pad: 0,
        transpose_x: false,
        epilogue: Epilogue::Relu,
    }
}

/// Relu's backward `dy · Wᵀ` gated by the pre-activation: W stored `[n, k]`, as Burn's Linear
/// holds a `[d_in, d_out]` weight; no bias, no pre.
const fn relu_grad(m: usize, k: usize, n: usize, specials: bool) -> Case {
    Case {
        transpose_w: true,
        bias: false,
        pre: false,
        specials,
        epilogue: Epilogue::ReluGrad,
        ..case(m, k, n)
    }
}

/// `epilogue`'s backward `dy · Wᵀ`, laid out as [`relu_grad`]: GELU's (`gelu_backward(pre, ..)`),
/// SiLU's (its saved sigmoid the second operand), tanh GELU's (its saved `tanh + 1` and tanh
/// input the second and third), LeakyReLU's (its gate the forward's saved bool mask, u8 as CUDA
/// stores bools, one element 2, which is true as any nonzero byte; its slope the first
/// parameter), SwiGLU's (the up projection the third operand, then SiLU's backward with the
/// saved sigmoid), or ReLU's or GELU's through dropout (the product scaled by the first
/// parameter and multiplied by a 0/1 mask before the gate).
const fn grad(epilogue: Epilogue, m: usize, k: usize, n: usize, specials: bool) -> Case {
    Case {
        epilogue,
        ..relu_grad(m, k, n, specials)
    }
}

const CASES: [Case; 37] = [
    Case {
        x_pad: 24,
        lead: 2,
        ..case(70, 200, 96)
    },
    case(128, 64, 256),
    Case {
        bias: false,
        pre: false,
        ..case(1, 8, 8)
    },
    Case {
        specials: true,
        ..case(17, 72, 40)
    },
    Case {
        transpose_w: true,
        pre: false,
        ..case(300, 1000, 264)
    },
    Case {
        lead: 2,
        ..case(9, 64, 136)
    },
    case(1024, 512, 1024),
    Case {
        transpose_w: true,
        specials: true,
        ..case(260, 4096, 520)
    },
    Case {
        bias: false,
        ..case(65, 136, 8)
    },
    // Weight gradients xᵀ · dy: x stored [k, m] (k is the batch).
    Case {
        transpose_x: true,
        bias: false,
        pre: false,
        epilogue: Epilogue::Identity,
        ..case(256, 512, 192)
    },
    Case {
        transpose_x: true,
        x_pad: 2,
        bias: false,
        pre: false,
        specials: true,
        epilogue: Epilogue::Identity,
        ..case(70, 40, 136)
    },
    Case {
        transpose_x: true,
        epilogue: Epilogue::Identity,
        ..case(1024, 2056, 64)
    },
    // Relu backward, gated by the pre-activation.
    relu_grad(300, 264, 1000, true),
    relu_grad(33, 1024, 4096, false),
    // More tiles than an H100 has SMs (136 of 128 × 256, 272 of 128 × 128): a persistent CTA
    // runs a second tile, so the staged pre, the gate's arrival and its barrier phase carry
    // over from one tile to the next.
    relu_grad(2176, 64, 2048, true),
    // GELU's backward: the derivative of the gate, times the product.
    grad(Epilogue::GeluGrad, 300, 264, 1000, true),
    grad(Epilogue::GeluGrad, 2176, 64, 2048, false),
    // SiLU's backward reads the saved sigmoid beside the gate; dropout's backward its mask.
    grad(Epilogue::SiluGrad, 300, 264, 1000, true),
    grad(Epilogue::SiluGrad, 2176, 64, 2048, false),
    grad(Epilogue::GeluTanhGrad, 300, 264, 1000, true),
    grad(Epilogue::GeluTanhGrad, 2176, 64, 2048, false),
    grad(Epilogue::LeakyReluGrad, 300, 264, 1000, true),
    grad(Epilogue::LeakyReluGrad, 2176, 64, 2048, false),
    grad(Epilogue::SwigluGrad, 300, 264, 1000, true),
    grad(Epilogue::SwigluGrad, 2176, 64, 2048, false),
    grad(Epilogue::ReluGradDropout, 300, 264, 1000, true),
    grad(Epilogue::ReluGradDropout, 2176, 64, 2048, true),
    grad(Epilogue::GeluGradDropout, 33, 1024, 4096, true),
    Case {
        specials: true,
        ..case(2176, 64, 2048)
    },
    // Every other activation, with NaN / ±Inf inputs, with and without bias and pre.
    Case {
        specials: true,
        epilogue: Epilogue::Gelu,
        ..case(200, 72, 136)
    },
    Case {
        bias: false,
        epilogue: Epilogue::Gelu,
        ..case(130, 256, 512)
    },
    Case {
        specials: true,
        epilogue: Epilogue::GeluTanh,
        ..case(200, 72, 136)
    },
    Case {
        specials: true,
        pre: false,
        epilogue: Epilogue::Silu,
        ..case(200, 72, 136)
    },
    Case {
        specials: true,
        epilogue: Epilogue::LeakyRelu,
        ..case(200, 72, 136)
    },
    Case {
        specials: true,
        bias: false,
        epilogue: Epilogue::Clamp,
        ..case(200, 72, 136)
    },
    // SwiGLU's forward: SiLU, then times the up projection (the third operand); with more
    // tiles than SMs and the pre-activation written.
    Case {
        specials: true,
        bias: false,
        pre: false,
        epilogue: Epilogue::Swiglu,
        ..case(200, 72, 136)
    },
    Case {
        bias: false,
        epilogue: Epilogue::Swiglu,
        ..case(2176, 64, 2048)
    },
];

/// The run-time parameters every case passes: LeakyReLU's slope, clamp's bounds.
const PARAMS: [f32; 2] = [-0.25, 0.75];

/// The activation in float64, with the special values as the kernel (and Burn on CUDA) give
/// them: clamp is `max(min, min(max, v))`, which takes NaN to `max`.
fn activation(epilogue: Epilogue, v: f64) -> f64 {
    let [alpha, beta] = PARAMS.map(f64::from);
    match epilogue {
        Epilogue::Relu if v <= 0.0 => 0.0,
        Epilogue::Gelu => v * (libm::erf(v / std::f64::consts::SQRT_2) + 1.0) / 2.0,
        Epilogue::GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            v * ((c * (v + 0.044715 * v.powi(3))).tanh() + 1.0) * 0.5
        }
        Epilogue::Silu => v * (-(((-v).exp() + 1.0).ln())).exp(),
        Epilogue::LeakyRelu if v < 0.0 => v * alpha,
        Epilogue::Clamp => alpha.max(beta.min(v)),
        _ => v,
    }
}

/// A float format the kernel runs: rounding from f64, bits (in the low `SIZE` bytes of a
/// `u32`), and back.
trait Float: Copy {
    const DTYPE: DType;
    /// Bytes per element.
    const SIZE: usize;
    /// ‖out − ref‖ / ‖ref‖ the issue allows.
    const TOLERANCE: f64;
    fn round(v: f64) -> u32;
    fn value(bits: u32) -> f64;
}

impl Float for bf16 {
    const DTYPE: DType = DType::BF16;
    const SIZE: usize = 2;
    const TOLERANCE: f64 = 1e-2;
    fn round(v: f64) -> u32 {
        bf16::from_f64(v).to_bits().into()
    }
    fn value(bits: u32) -> f64 {
        bf16::from_bits(bits as u16).to_f64()
    }
}

impl Float for f16 {
    const DTYPE: DType = DType::F16;
    const SIZE: usize = 2;
    const TOLERANCE: f64 = 2e-3;
    fn round(v: f64) -> u32 {
        f16::from_f64(v).to_bits().into()
    }
    fn value(bits: u32) -> f64 {
        f16::from_bits(bits as u16).to_f64()
    }
}

/// f32, which the kernel multiplies as TF32 (a 10-bit mantissa, as f16's, truncated): the
/// products carry up to 2⁻⁹ relative error, so f16's tolerance (`tests/suite/check.rs`,
/// `norm_tolerance`, says why).
impl Float for f32 {
    const DTYPE: DType = DType::F32;
    const SIZE: usize = 4;
    const TOLERANCE: f64 = 2e-3;
    fn round(v: f64) -> u32 {
        (v as f32).to_bits()
    }
    fn value(bits: u32) -> f64 {
        f32::from_bits(bits).into()
    }
}

/// A NaN in every format (its low 16 bits are one too): where the kernel must write, and the
/// padding it must not read.
const POISON: u32 = 0x7FC1_7FC1;

/// Deterministic values in [-1, 1) (the suite's, in f64).
fn values(len: usize, seed: u64) -> Vec<f64> {
    common::values(seed, len)
        .into_iter()
        .map(f64::from)
        .collect()
}

struct Device {
    client: ComputeClient<CudaRuntime>,
    device: CudaDevice,
}

impl Device {
    fn cuda() -> Self {
        let device = CudaDevice::default();
        let client = CudaRuntime::client(&device);
        Self { client, device }
    }

    /// The default CUDA device, if it runs the kernel (says so on stderr when it does not).
    fn hopper() -> Option<Self> {
        let device = CudaDevice::default();
        let client = CudaRuntime::client(&device);
        if !supported(&client) {
            eprintln!("no sm_90 device: the wgmma kernel is not exercised here");
            return None;
        }
        Some(Self::cuda())
    }

    fn upload<H: Float>(
        &self,
        bits: &[u32],
        shape: Vec<usize>,
        strides: Vec<usize>,
    ) -> CubeTensor<CudaRuntime> {
        self.upload_as(bits, H::SIZE, H::DTYPE, shape, strides)
    }

    /// `bits` as elements of `size` bytes, of `dtype`.
    fn upload_as(
        &self,
        bits: &[u32],
        size: usize,
        dtype: DType,
        shape: Vec<usize>,
        strides: Vec<usize>,
    ) -> CubeTensor<CudaRuntime> {
        let bytes: Vec<u8> = (bits.iter())
            .flat_map(|b| b.to_le_bytes().into_iter().take(size))
            .collect();
        CubeTensor::new(
            self.client.clone(),
            self.client.create_from_slice(&bytes),
            Metadata::new(Shape::from(shape), Strides::new(&strides)),
            self.device.clone(),
            dtype,
        )
    }

    fn download<H: Float>(&self, tensor: &CubeTensor<CudaRuntime>) -> Vec<u32> {
        self.read::<H>(tensor.handle.clone())
    }

    fn read<H: Float>(&self, handle: cubecl::server::Handle) -> Vec<u32> {
        let bytes = self
            .client
            .read_one(handle)
            .expect("the kernel ran without a device error");
        bytes
            .chunks_exact(H::SIZE)
            .map(|c| c.iter().rev().fold(0, |bits, &b| bits << 8 | u32::from(b)))
            .collect()
    }
}

fn contiguous(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len() - 1).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// One case's host data: the operands as stored on the device and the float64 references,
/// computed once and checked against every tiling.
struct Prepared {
    case: Case,
    x: (Vec<u32>, Vec<usize>, Vec<usize>),
    w: (Vec<u32>, Vec<usize>, Vec<usize>),
    bias: Vec<u32>,
    gate: Vec<u32>,
    /// The second gate-shaped operand: SiLU's saved sigmoid of the gate, tanh GELU's saved
    /// `tanh + 1`, or dropout's mask.
    mask: Vec<u32>,
    /// The third: tanh GELU's saved tanh input, SwiGLU's up projection (zeros for the others).
    aux: Vec<u32>,
    out_shape: Vec<usize>,
    out_ref: Vec<f64>,
    pre_ref: Vec<f64>,
    /// Relu's backward also sums its output's rows (a bias gradient).
    bias_grad_ref: Vec<f64>,
}

/// Builds one case's operands and its float64 references.
fn prepare<H: Float>(c: Case) -> Prepared {
    let rows = c.lead * c.m;
    assert!(!c.transpose_x || c.lead == 1, "a transposed x is a matrix");
    let round = |v: &[f64]| v.iter().map(|&v| H::round(v)).collect::<Vec<u32>>();
    let mut x = values(rows * c.k, 1 + c.k as u64);
    if c.specials {
        x[c.k + 3] = f64::NAN;
        x[5 * c.k + 1] = f64::INFINITY;
        x[7 * c.k + 2] = f64::NEG_INFINITY;
    }
    let w = values(c.k * c.n, 2 + c.n as u64);
    let b = values(c.n, 3);
    let (xb, wb, bb) = (round(&x), round(&w), round(&b));
    let (x, w, b): (Vec<f64>, Vec<f64>, Vec<f64>) = (
        xb.iter().map(|&v| H::value(v)).collect(),
        wb.iter().map(|&v| H::value(v)).collect(),
        bb.iter().map(|&v| H::value(v)).collect(),
    );

    let out_shape = if c.lead > 1 {
        vec![c.lead, c.m, c.n]
    } else {
        vec![c.m, c.n]
    };
    let mut x_shape = out_shape.clone();
    *x_shape.last_mut().unwrap() = c.k;
    let rank = out_shape.len();
    let mut w_shape = vec![1; rank - 2];
    w_shape.extend([c.k, c.n]);
    let (w_bits, mut w_strides) = if c.transpose_w {
        let mut t = vec![0u32; c.k * c.n];
        for k in 0..c.k {
            for n in 0..c.n {
                t[n * c.k + k] = wb[k * c.n + n];
            }
        }
        (t, vec![1, c.k])
    } else {
        (wb.clone(), vec![c.n, 1])
    };
    let mut lead_strides = vec![0; rank - 2];
    lead_strides.append(&mut w_strides);
    // x's storage rows `pitch` elements apart, the padding poisoned: [m, k] rows, or [k, m]
    // rows viewed transposed.
    let (x_pitched, x_strides) = if c.transpose_x {
        let pitch = c.m + c.x_pad;
        let mut storage = vec![POISON; c.k * pitch];
        for i in 0..c.m {
            for k in 0..c.k {
                storage[k * pitch + i] = xb[i * c.k + k];
            }
        }
        (storage, vec![1, pitch])
    } else {
        let pitch = c.k + c.x_pad;
        let mut storage = vec![POISON; rows * pitch];
        for r in 0..rows {
            storage[r * pitch..r * pitch + c.k].copy_from_slice(&xb[r * c.k..(r + 1) * c.k]);
        }
        let strides = contiguous(&x_shape)
            .iter()
            .enumerate()
            .map(|(i, &s)| if i + 1 < rank { s / c.k * pitch } else { s })
            .collect();
        (storage, strides)
    };
    // The gate: signs at random, exact zeros of both signs, and a NaN (which keeps the value).
    let mut gate = values(rows * c.n, 5);
    for (g, special) in gate.iter_mut().zip([0.0, f64::NAN, -0.0]) {
        *g = special;
    }

    // Row by row, k outer: each row of x has at most one special value, so NaN and ±Inf land
    // where a dot product in any order puts them.
    let mut pre_ref = vec![0.0f64; rows * c.n];
    for (i, row) in pre_ref.chunks_exact_mut(c.n).enumerate() {
        for kk in 0..c.k {
            let xv = x[i * c.k + kk];
            for (r, &wv) in row.iter_mut().zip(&w[kk * c.n..(kk + 1) * c.n]) {
                *r += xv * wv;
            }
        }
        if c.bias {
            row.iter_mut().zip(&b).for_each(|(r, &bv)| *r += bv);
        }
    }
    // LeakyReLU's gate is its saved bool mask: 0 or 1, and one 2 (true, as any nonzero byte).
    if c.epilogue == Epilogue::LeakyReluGrad {
        gate = gate.iter().map(|&g| (g < 0.0) as u8 as f64).collect();
        gate[1] = 2.0;
    }
    // The gate as stored, and the second operand: SiLU's saved sigmoid of it (rounded as the
    // forward stores it), tanh GELU's saved tanh + 1 of its saved tanh input (the third),
    // else a 0/1 dropout mask.
    let gate: Vec<f64> = round(&gate).into_iter().map(H::value).collect();
    let stored = |v: Vec<f64>| -> Vec<f64> { round(&v).into_iter().map(H::value).collect() };
    let aux: Vec<f64> = match c.epilogue {
        Epilogue::GeluTanhGrad => {
            stored(gate.iter().map(|&g| common::gelu_tanh_inner(g)).collect())
        }
        Epilogue::SwigluGrad | Epilogue::Swiglu => stored(values(rows * c.n, 7)),
        _ => vec![0.0; gate.len()],
    };
    let mask: Vec<f64> = match c.epilogue {
        Epilogue::GeluTanhGrad => stored(aux.iter().map(|&i| i.tanh() + 1.0).collect()),
        Epilogue::SiluGrad | Epilogue::SwigluGrad => round(
            &gate
                .iter()
                .map(|&g| common::sigmoid_reference(g))
                .collect::<Vec<_>>(),
        )
        .into_iter()
        .map(H::value)
        .collect(),
        _ => values(rows * c.n, 6)
            .iter()
            .map(|&v| (v > 0.0) as u8 as f64)
            .collect(),
    };
    let scale = PARAMS[0] as f64;
    let out_ref: Vec<f64> = (pre_ref.iter().zip(&gate).zip(&mask).zip(&aux))
        .map(|(((&v, &g), &s), &i)| match c.epilogue {
            Epilogue::ReluGrad if g <= 0.0 => 0.0,
            Epilogue::GeluGrad => common::gelu_grad_reference(g) * v,
            Epilogue::ReluGradDropout if g <= 0.0 => 0.0,
            Epilogue::ReluGradDropout => v * scale * s,
            Epilogue::GeluGradDropout => common::gelu_grad_reference(g) * (v * scale * s),
            Epilogue::SiluGrad => common::silu_grad_with_saved(g, s, v),
            Epilogue::SwigluGrad => common::silu_grad_with_saved(g, s, v * i),
            Epilogue::Swiglu => activation(Epilogue::Silu, v) * i,
            Epilogue::GeluTanhGrad => common::gelu_tanh_grad_with_saved(g, s, i, v),
            Epilogue::LeakyReluGrad if g != 0.0 => v * PARAMS[0] as f64,
            Epilogue::LeakyReluGrad => v,
            epilogue => activation(epilogue, v),
        })
        .collect();
    let mut bias_grad_ref = vec![0.0f64; c.n];
    for (i, v) in out_ref.iter().enumerate() {
        bias_grad_ref[i % c.n] += v;
    }
    Prepared {
        case: c,
        x: (x_pitched, x_shape, x_strides),
        w: (w_bits, w_shape, lead_strides),
        bias: bb,
        gate: match c.epilogue {
            Epilogue::LeakyReluGrad => gate.iter().map(|&g| g as u32).collect(),
            _ => round(&gate),
        },
        mask: round(&mask),
        aux: round(&aux),
        out_shape,
        out_ref,
        pre_ref,
        bias_grad_ref,
    }
}

/// Runs one prepared case on one tiling; returns a description of the first failure.
fn run<H: Float>(dev: &Device, tiling: WgmmaTiling, p: &Prepared) -> Result<(), String> {
    run_with_id::<H>(dev, tiling, p, None)
}

/// [`run`], `w` carrying a burn-fusion id (a TF32 launch may keep `w`'s K-major copy under it).
fn run_with_id<H: Float>(
    dev: &Device,
    tiling: WgmmaTiling,
    p: &Prepared,
    w_id: Option<u64>,
) -> Result<(), String> {
    run_args::<H>(dev, p, w_id, |args| launch(tiling, &args))
}

/// Builds `p`'s device operands (outputs poisoned), runs `go` on them and compares what it
/// wrote with the float64 references; `go`'s error (a decline) is returned as it is.
fn run_args<H: Float>(
    dev: &Device,
    p: &Prepared,
    w_id: Option<u64>,
    go: impl FnOnce(LinearArgs<CudaRuntime>) -> Result<(), String>,
) -> Result<(), String> {
    let c = p.case;
    let out_strides = contiguous(&p.out_shape);
    // Poison: NaN everywhere the kernel must write.
    let poison = vec![POISON; p.out_ref.len()];
    let output = || dev.upload::<H>(&poison, p.out_shape.clone(), out_strides.clone());
    let gated = c.epilogue.gated();
    let args = LinearArgs {
        x: dev.upload::<H>(&p.x.0, p.x.1.clone(), p.x.2.clone()),
        w: dev.upload::<H>(&p.w.0, p.w.1.clone(), p.w.2.clone()),
        w_id,
        bias: c.bias.then(|| dev.upload::<H>(&p.bias, vec![c.n], vec![1])),
        out: output(),
        pre: c.pre.then(output),
        epilogue: c.epilogue,
        gate: gated.then(|| match c.epilogue.gate().is_bool() {
            true => dev.upload_as(
                &p.gate,
                1,
                DType::Bool(BoolStore::U8),
                p.out_shape.clone(),
                out_strides.clone(),
            ),
            false => dev.upload::<H>(&p.gate, p.out_shape.clone(), out_strides.clone()),
        }),
        mask: (c.epilogue.masked())
            .then(|| dev.upload::<H>(&p.mask, p.out_shape.clone(), out_strides.clone())),
        aux: (c.epilogue.has_aux())
            .then(|| dev.upload::<H>(&p.aux, p.out_shape.clone(), out_strides.clone())),
        params: PARAMS,
        bias_grad: gated.then(|| dev.upload::<H>(&poison[..c.n], vec![1, c.n], vec![c.n, 1])),
        // What the configuration in force offers (`HYPATIA_WGMMA`, `HYPATIA_WEIGHT_COPIES_MIB`).
        choices: EngineChoices::new(&hypatia::config::config(), F32Math::Tf32),
    };
    go(args.clone())?;
    let check = || {
        compare::<H>("out", &dev.download::<H>(&args.out), &p.out_ref)?;
        if let Some(pre) = &args.pre {
            compare::<H>("pre", &dev.download::<H>(pre), &p.pre_ref)?;
        }
        if let Some(bias_grad) = &args.bias_grad {
            compare::<H>(
                "bias gradient",
                &dev.download::<H>(bias_grad),
                &p.bias_grad_ref,
            )?;
        }
        Ok(())
    };
    check().map_err(|e: String| format!("{WRONG}{e}"))
}

/// How a result that differs from the reference starts its message (a decline never does).
const WRONG: &str = "wrong: ";

/// Same NaN/±Inf positions, and the finite values within the dtype's relative error.
fn compare<H: Float>(what: &str, got: &[u32], reference: &[f64]) -> Result<(), String> {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (i, (&bits, &r)) in got.iter().zip(reference).enumerate() {
        let g = H::value(bits);
        let same_class = (g.is_nan() && r.is_nan())
            || (g.is_infinite() && g == r)
            || (g.is_finite() && r.is_finite());
        if !same_class {
            return Err(format!("{what}[{i}] = {g}, reference {r}"));
        }
        if r.is_finite() {
            err += (g - r) * (g - r);
            norm += r * r;
        }
    }
    let rel = err.sqrt() / norm.sqrt().max(f64::MIN_POSITIVE);
    if rel > H::TOLERANCE {
        return Err(format!(
            "{what}: relative error {rel:.2e} > {:.0e}",
            H::TOLERANCE
        ));
    }
    Ok(())
}

/// Every tiling the engine can run `H` on, on every case, on a Hopper GPU (nothing runs without
/// one): 16-bit types on the 16-bit tilings, f32 on those that fit it and the TF32 ones.
/// Each tiling compiles a kernel per case (seconds each with NVRTC), so two variables split the
/// work: `HYPATIA_TEST_TILINGS=<text>` keeps the tilings whose name contains it (checking one
/// new tiling), and `HYPATIA_TEST_SHARD=i/n` keeps every n-th from the i-th (0-based), so that n
/// processes share the tilings (`tools/device/run.sh suite`).
fn check_all<H: Float>() {
    let Some(dev) = &Device::hopper() else {
        return;
    };
    let only = std::env::var("HYPATIA_TEST_TILINGS").unwrap_or_default();
    let (shard, shards) = shard();
    let tf32 = WGMMA_TF32_TILINGS.into_iter().filter(|_| H::SIZE == 4);
    let tilings: Vec<_> = (WGMMA_TILINGS.into_iter())
        .chain(WGMMA_FORCED_TILINGS)
        .chain(tf32)
        .filter(|t| t.runs(H::SIZE) && t.name().contains(&only))
        .enumerate()
        .filter(|(i, _)| i % shards == shard)
        .map(|(_, t)| t)
        .collect();
    assert!(!tilings.is_empty(), "no tiling left by the filters");
    let mut failures = Vec::new();
    for c in CASES {
        let prepared = prepare::<H>(c);
        for &tiling in &tilings {
            if let Err(e) = run::<H>(dev, tiling, &prepared) {
                failures.push(format!("{:?} {}: {c:?}: {e}", H::DTYPE, tiling.name()));
            }
        }
        eprintln!("{:?} {c:?}: {} tilings run", H::DTYPE, tilings.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn wgmma_linear_matches_f64_reference_bf16() {
    let _serial = serial();
    check_all::<bf16>();
}

// One test per element type, so that they (each compiling every tiling's kernels) can run as
// processes side by side.
#[test]
fn wgmma_linear_matches_f64_reference_f16() {
    let _serial = serial();
    check_all::<f16>();
}

/// f32 as TF32: x and w in every layout, those not K-major copied K-major first.
#[test]
fn wgmma_linear_matches_f64_reference_tf32() {
    let _serial = serial();
    check_all::<f32>();
}

/// Tiny and odd problems (`m, k, n` from 1 to 65, `k` of 1, 5 and 45): forward with bias,
/// pre-activation and NaN/±Inf, rank 3, ReLU's, GELU's (through dropout too) and SiLU's backward
/// `dy · Wᵀ` gated, SwiGLU's forward and backward, and weight gradients `xᵀ · dy`.
const TINY: [Case; 16] = [
    case(1, 1, 1),
    Case {
        lead: 2,
        ..case(1, 5, 17)
    },
    Case {
        specials: true,
        epilogue: Epilogue::Gelu,
        ..case(17, 45, 33)
    },
    relu_grad(33, 5, 65, true),
    relu_grad(64, 64, 64, false),
    grad(Epilogue::GeluGrad, 17, 45, 33, true),
    grad(Epilogue::SiluGrad, 17, 45, 33, true),
    grad(Epilogue::GeluTanhGrad, 17, 45, 33, true),
    grad(Epilogue::LeakyReluGrad, 17, 45, 33, true),
    grad(Epilogue::SwigluGrad, 17, 45, 33, true),
    Case {
        specials: true,
        bias: false,
        epilogue: Epilogue::Swiglu,
        ..case(17, 45, 33)
    },
    grad(Epilogue::GeluGradDropout, 33, 5, 64, true),
    Case {
        lead: 3,
        bias: false,
        pre: false,
        ..case(45, 5, 32)
    },
    Case {
        transpose_x: true,
        bias: false,
        pre: false,
        epilogue: Epilogue::Identity,
        ..case(33, 1, 65)
    },
    Case {
        transpose_x: true,
        x_pad: 3,
        bias: false,
        pre: false,
        specials: true,
        epilogue: Epilogue::Identity,
        ..case(9, 45, 5)
    },
    Case {
        transpose_w: true,
        ..case(17, 64, 1)
    },
];

/// Every candidate of the engine (Burn's matmul, the tiled kernel, each cubek tiling and, on
/// Hopper, each `wgmma` tiling) on every [`TINY`] problem, with its size gate off: each either
/// declines the problem or matches the float64 reference, and each returns. Under autotune the
/// tilings decline every one of these problems (too small for a tensor-core tiling), and Burn's
/// matmul and the tiled kernel take every one. `HYPATIA_TEST_SHARD=i/n` keeps every n-th
/// candidate from the i-th, as [`check_all`] does with tilings.
fn check_candidates<H: Float>() {
    let dev = &Device::cuda();
    let (shard, shards) = shard();
    let names: Vec<String> = hypatia::kernel::engine::candidate_names::<CudaRuntime>()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % shards == shard)
        .map(|(_, name)| name)
        .collect();
    let (mut failures, mut ran) = (Vec::new(), 0);
    for c in TINY {
        let prepared = prepare::<H>(c);
        for name in &names {
            let raw = run_args::<H>(dev, &prepared, None, |args| {
                hypatia::kernel::engine::run_candidate(name, args, false).expect("a candidate")
            });
            let gated = run_args::<H>(dev, &prepared, None, |args| {
                hypatia::kernel::engine::run_candidate(name, args, true).expect("a candidate")
            });
            let always = name == "burn" || name == "tiled";
            match (raw, gated) {
                (Ok(()), Ok(())) if always => ran += 1,
                (Ok(()), Err(_)) if !always => ran += 1,
                (Err(reason), Err(_)) if !always && !reason.starts_with(WRONG) => {
                    eprintln!("{:?} {name}: {c:?}: declined: {reason}", H::DTYPE)
                }
                (raw, gated) => failures.push(format!(
                    "{:?} {name}: {c:?}: ungated {raw:?}, under autotune {gated:?}",
                    H::DTYPE
                )),
            }
        }
        eprintln!("{:?} {c:?}: {} candidates", H::DTYPE, names.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran > 0, "no candidate ran a problem");
}

/// The shard of the work this process takes: `HYPATIA_TEST_SHARD=i/n`, else all of it.
fn shard() -> (usize, usize) {
    std::env::var("HYPATIA_TEST_SHARD")
        .ok()
        .and_then(|v| {
            let (i, n) = v.split_once('/')?;
            Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?.max(1)))
        })
        .unwrap_or((0, 1))
}

#[test]
fn engine_candidates_on_tiny_problems_bf16() {
    let _serial = serial();
    check_candidates::<bf16>();
}

#[test]
fn engine_candidates_on_tiny_problems_f16() {
    let _serial = serial();
    check_candidates::<f16>();
}

/// f32 with TF32 allowed (`f32 = "tf32"`), so that every candidate may take it.
#[test]
fn engine_candidates_on_tiny_problems_f32() {
    let _serial = serial();
    check_candidates::<f32>();
}

/// A TF32 weight read again keeps its K-major copy under its id from the second launch on
/// (decision record 0009); every launch, first, keeping or reading the copy, matches the
/// reference, another weight of another id reads its own values, and `forget` drops the copy.
#[test]
fn tf32_weight_copies_are_kept_read_and_forgotten() {
    let _serial = serial();
    let Some(dev) = &Device::hopper() else {
        return;
    };
    let tiling = WGMMA_TF32_TILINGS[0];
    let (first, other) = (prepare::<f32>(CASES[6]), prepare::<f32>(CASES[3]));
    assert!(
        !CASES[6].transpose_w && !CASES[3].transpose_w,
        "N-major weights"
    );
    let (id, other_id) = (u64::MAX - 1, u64::MAX - 2);
    let before = kept_bytes();
    let copy_bytes = |c: Case| c.k * c.n * 4;
    for launch in 0..3 {
        run_with_id::<f32>(dev, tiling, &first, Some(id))
            .unwrap_or_else(|e| panic!("launch {launch}: {e}"));
        run_with_id::<f32>(dev, tiling, &other, Some(other_id))
            .unwrap_or_else(|e| panic!("the other weight, launch {launch}: {e}"));
        // Each weight's copy is kept from its second launch on.
        let kept = match launch {
            0 => 0,
            _ => copy_bytes(CASES[6]) + copy_bytes(CASES[3]),
        };
        assert_eq!(kept_bytes() - before, kept, "launch {launch}");
    }
    forget(id);
    forget(other_id);
    assert_eq!(kept_bytes(), before);
    run_with_id::<f32>(dev, tiling, &first, Some(id)).expect("after forget");
    forget(id);
}

#[test]
fn wgmma_declines_what_it_cannot_run() {
    let _serial = serial();
    let Some(dev) = Device::hopper() else {
        return;
    };
    let Case { m, k, n, .. } = case(16, 12, 16);
    let bits = vec![0u32; m * k.max(n) * k.max(n)];
    let args = LinearArgs {
        x: dev.upload::<bf16>(&bits[..m * k], vec![m, k], vec![k, 1]),
        w: dev.upload::<bf16>(&bits[..k * n], vec![k, n], vec![n, 1]),
        w_id: None,
        bias: None,
        out: dev.upload::<bf16>(&bits[..m * n], vec![m, n], vec![n, 1]),
        pre: None,
        epilogue: Epilogue::Relu,
        gate: None,
        mask: None,
        aux: None,
        params: [0.0; 2],
        bias_grad: None,
        // What the configuration in force offers (`HYPATIA_WGMMA`, `HYPATIA_WEIGHT_COPIES_MIB`).
        choices: EngineChoices::new(&hypatia::config::config(), F32Math::Tf32),
    };
    let err = launch(WGMMA_TILINGS[0], &args).unwrap_err();
    assert!(err.contains("multiples of 8"), "{err}");
    let f32_args = LinearArgs {
        x: CubeTensor {
            dtype: DType::F32,
            ..args.x.clone()
        },
        ..args
    };
    // f32 stages 4-byte outputs: the widest tiling's staging no longer fits shared memory.
    let err = launch(WGMMA_TILINGS[0], &f32_args).unwrap_err();
    assert!(err.contains("does not fit"), "{err}");
    let (m, k, n) = (16, 16, 16);
    let gateless = LinearArgs {
        x: dev.upload::<bf16>(&bits[..m * k], vec![m, k], vec![k, 1]),
        w: dev.upload::<bf16>(&bits[..k * n], vec![k, n], vec![n, 1]),
        w_id: None,
        out: dev.upload::<bf16>(&bits[..m * n], vec![m, n], vec![n, 1]),
        epilogue: Epilogue::ReluGrad,
        ..f32_args
    };
    let err = launch(WGMMA_TILINGS[0], &gateless).unwrap_err();
    assert!(err.contains("gate"), "{err}");
    // A mask goes with dropout's, SiLU's and tanh GELU's backward, and with nothing else.
    let maskless = LinearArgs {
        epilogue: Epilogue::ReluGradDropout,
        gate: Some(gateless.out.clone()),
        ..gateless.clone()
    };
    let err = launch(WGMMA_TILINGS[0], &maskless).unwrap_err();
    assert!(err.contains("mask"), "{err}");
    let stray = LinearArgs {
        epilogue: Epilogue::ReluGrad,
        mask: Some(gateless.out.clone()),
        ..maskless.clone()
    };
    let err = launch(WGMMA_TILINGS[0], &stray).unwrap_err();
    assert!(err.contains("mask"), "{err}");
    // An aux operand goes with tanh GELU's backward alone.
    let stray_aux = LinearArgs {
        epilogue: Epilogue::ReluGrad,
        aux: Some(gateless.out.clone()),
        ..maskless.clone()
    };
    let err = launch(WGMMA_TILINGS[0], &stray_aux).unwrap_err();
    assert!(err.contains("aux"), "{err}");
    // A TMA-store tiling stages pre and the gate in one buffer: never both.
    let both = LinearArgs {
        gate: Some(gateless.out.clone()),
        pre: Some(gateless.out.clone()),
        ..gateless
    };
    assert!(WGMMA_TILINGS[0].tma_store);
    let err = launch(WGMMA_TILINGS[0], &both).unwrap_err();
    assert!(err.contains("staging"), "{err}");
}

/// One grid-chain case: `x` of shape `lead ++ [m, widths[0]]`, each layer `widths[i] →
/// widths[i + 1]`, relu on every layer but the last.
#[derive(Clone, Copy, Debug)]
struct ChainCase {
    lead: usize,
    m: usize,
    widths: &'static [usize],
    bias: bool,
    specials: bool,
    /// Elements of padding after each row of `x`.
    x_pad: usize,
}

const fn chain_case(m: usize, widths: &'static [usize]) -> ChainCase {
    ChainCase {
        lead: 1,
        m,
        widths,
        bias: true,
        specials: false,
        x_pad: 0,
    }
}

const CHAIN_CASES: [ChainCase; 9] = [
    chain_case(1, &[784, 512, 512, 10]),
    chain_case(8, &[784, 512, 512, 10]),
    chain_case(33, &[784, 512, 512, 10]),
    chain_case(64, &[1024, 1024, 1024, 1024, 1024]),
    ChainCase {
        bias: false,
        ..chain_case(17, &[33, 17, 9, 5])
    },
    ChainCase {
        specials: true,
        ..chain_case(17, &[64, 64, 64])
    },
    ChainCase {
        x_pad: 8,
        lead: 3,
        ..chain_case(5, &[40, 24, 8])
    },
    chain_case(3, &[16, 1000]),
    chain_case(2, &[1000, 24, 1]),
];

/// Runs one chain case on the grid-wide kernel; returns a description of the first failure.
fn run_chain<H: Float>(dev: &Device, c: ChainCase) -> Result<(), String> {
    let rows = c.lead * c.m;
    let k0 = c.widths[0];
    let round = |v: &[f64]| v.iter().map(|&v| H::round(v)).collect::<Vec<u32>>();
    let mut x = values(rows * k0, 11 + k0 as u64);
    if c.specials {
        x[3] = f64::NAN;
        x[5 * k0 + 1] = f64::INFINITY;
        x[7 * k0 + 2] = f64::NEG_INFINITY;
    }
    let xb = round(&x);
    let pitch = k0 + c.x_pad;
    let mut x_storage = vec![POISON; rows * pitch];
    for r in 0..rows {
        x_storage[r * pitch..r * pitch + k0].copy_from_slice(&xb[r * k0..(r + 1) * k0]);
    }
    let mut x_shape = vec![c.m, k0];
    let mut x_strides = vec![pitch, 1];
    if c.lead > 1 {
        x_shape.insert(0, c.lead);
        x_strides.insert(0, c.m * pitch);
    }
    let x_operand = Operand {
        handle: dev
            .upload::<H>(&x_storage, x_shape.clone(), x_strides.clone())
            .into(),
        shape: x_shape.clone(),
        id: None,
    };
    let layer_count = c.widths.len() - 1;
    let mut weights = Vec::new();
    for i in 0..layer_count {
        let (k, n) = (c.widths[i], c.widths[i + 1]);
        // Scaled by 1/√k, as initialisers do, so that sums stay within f16's range.
        let scale = 1.0 / (k as f64).sqrt();
        let w: Vec<f64> = values(k * n, 20 + i as u64)
            .iter()
            .map(|v| v * scale)
            .collect();
        let w = round(&w);
        let b = round(&values(n, 30 + i as u64));
        let w_op = Operand {
            handle: dev.upload::<H>(&w, vec![k, n], vec![n, 1]).into(),
            shape: vec![k, n],
            id: None,
        };
        let b_op = Operand {
            handle: dev.upload::<H>(&b, vec![n], vec![1]).into(),
            shape: vec![n],
            id: None,
        };
        weights.push((w, b, w_op, b_op));
    }
    let epilogue = |i: usize| {
        if i + 1 < layer_count {
            Epilogue::Relu
        } else {
            Epilogue::Identity
        }
    };
    let layers: Vec<ChainLayer<'_, CudaRuntime>> = (weights.iter().enumerate())
        .map(|(i, (_, _, w, b))| ChainLayer {
            w: w.as_ref(),
            bias: c.bias.then_some(b.as_ref()),
            epilogue: epilogue(i),
        })
        .collect();
    let shapes: Vec<_> = (layers.iter())
        .map(|l| {
            let bias = l.bias.map(|b| b.shape);
            (l.w.shape, bias, H::DTYPE, l.epilogue)
        })
        .collect();
    let limits = ChainLimits::of(&dev.client);
    let problem = check_chain((&x_shape, &x_strides, H::DTYPE), &shapes, limits)
        .map_err(|e| format!("check_chain: {e}"))?;
    if !problem.grid {
        return Err("the device does not run the grid-wide kernel".into());
    }
    // Poison: a freed NaN buffer of the output's size, which the allocator hands out next.
    let n_last = c.widths[layer_count];
    drop(
        dev.client
            .create_from_slice(&vec![0xC1u8; rows * n_last * 2]),
    );
    let outputs = grid::launch(&problem, x_operand.as_ref(), &layers)?;

    // Reference: f64 products, each hidden layer rounded to the storage type as stored.
    let mut h: Vec<f64> = xb.iter().map(|&v| H::value(v)).collect();
    for (i, (w, b, _, _)) in weights.iter().enumerate() {
        let (k, n) = (c.widths[i], c.widths[i + 1]);
        let mut next = vec![0.0f64; rows * n];
        for r in 0..rows {
            for j in 0..n {
                let dot: f64 = (0..k)
                    .map(|kk| h[r * k + kk] * H::value(w[kk * n + j]))
                    .sum();
                let v = dot + if c.bias { H::value(b[j]) } else { 0.0 };
                let v = if epilogue(i) == Epilogue::Relu && v <= 0.0 {
                    0.0
                } else {
                    v
                };
                // Every layer's output is stored in the storage type.
                next[r * n + j] = H::value(H::round(v));
            }
        }
        h = next;
    }
    compare::<H>("out", &dev.read::<H>(outputs.out.handle.clone()), &h)
}

#[test]
fn grid_chain_matches_f64_reference() {
    let _serial = serial();
    let dev = Device::cuda();
    if !grid::supported(&dev.client) {
        eprintln!("the device does not run the grid-wide chain: not exercised here");
        return;
    }
    let mut failures = Vec::new();
    for c in CHAIN_CASES {
        for (dtype, result) in [
            (DType::BF16, run_chain::<bf16>(&dev, c)),
            (DType::F16, run_chain::<f16>(&dev, c)),
        ] {
            if let Err(e) = result {
                failures.push(format!("{dtype:?} {c:?}: {e}"));
            }
        }
        // Twice in a row: the barrier counters were left zeroed by the first launch.
        if let Err(e) = run_chain::<bf16>(&dev, c) {
            failures.push(format!("second bf16 run {c:?}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Two threads (two CubeCL streams) launching grid chains at once: each launch takes items
/// from its own counters, and none waits on blocks that another launch keeps from running.
#[test]
fn grid_chains_on_two_streams_complete() {
    let _serial = serial();
    let dev = Device::cuda();
    if !grid::supported(&dev.client) {
        eprintln!("the device does not run the grid-wide chain: not exercised here");
        return;
    }
    let big = chain_case(64, &[1024, 1024, 1024, 1024, 1024]);
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let dev = Device::cuda();
                    (0..10).try_for_each(|_| run_chain::<bf16>(&dev, big))
                })
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("no panic"))
            .collect()
    });
    for result in results {
        result.unwrap();
    }
}

//! The Hopper kernel's source for one configuration: [`Preamble`]'s header, the
//! configuration's `#define`s, the generated inline-PTX `wgmma` wrapper, the PTX helpers
//! (`wgmma_ptx.cuh`), then [`wgmma_linear.cu`](../../../src/kernel/hopper/wgmma_linear.cu).

use super::WgmmaTiling;
use crate::kernel::cuda::Preamble;
use crate::kernel::{Activation, Gate};
use burn_backend::DType;

/// The kernel's text, without its configuration.
pub const KERNEL_SOURCE: &str = include_str!("wgmma_linear.cu");
/// The inline-PTX helpers the kernel calls (mbarriers, TMA, wgmma fences), placed before it.
pub const PTX_HELPERS: &str = include_str!("wgmma_ptx.cuh");
/// Producer warpgroup + two consumer warpgroups.
pub(crate) const THREADS: u32 = 384;

/// Element type of the operands: 16-bit, or f32 multiplied as TF32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WgmmaElem {
    /// f16.
    F16,
    /// bf16.
    Bf16,
    /// f32, multiplied as TF32.
    Tf32,
}

impl WgmmaElem {
    /// The element type of `dtype`'s operands, if the kernel runs it.
    pub fn of(dtype: DType) -> Option<Self> {
        match dtype {
            DType::BF16 => Some(WgmmaElem::Bf16),
            DType::F16 => Some(WgmmaElem::F16),
            DType::F32 => Some(WgmmaElem::Tf32),
            _ => None,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            WgmmaElem::F16 | WgmmaElem::Bf16 => 2,
            WgmmaElem::Tf32 => 4,
        }
    }
}

/// One configuration of the kernel: everything that changes its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WgmmaSource {
    /// Tile shape, schedule, stages, stores.
    pub tiling: WgmmaTiling,
    /// Operand element type.
    pub elem: WgmmaElem,
    /// `x` a transposed view of `[k, m]` storage (M-major operand A) instead of `[m, k]`.
    pub a_m_major: bool,
    /// `w` stored `[n, k]` (K-major operand B) instead of `[k, n]`.
    pub b_k_major: bool,
    /// The activation, compiled in: a run-time switch over every activation's code in the
    /// epilogue cost the whole kernel 2.3x (decision record 0004).
    pub activation: Activation,
    /// What the epilogue does with a gate (an activation's backward), compiled in likewise.
    pub gate: Gate,
    /// Whether the gradient first passes back through dropout (scaled, times its mask), as
    /// [`Epilogue::dropout`](crate::kernel::Epilogue::dropout).
    pub dropout: bool,
    /// Whether the value is first multiplied by `aux` (SwiGLU's backward), as
    /// [`Epilogue::product`](crate::kernel::Epilogue::product).
    pub product: bool,
    /// A [bool gate](Gate::is_bool)'s bytes per element (1 for a u8 store, 4 for u32), read as
    /// that integer (`GATE_ELEM`); 0 for a gate of the operands' type.
    pub bool_gate_bytes: u8,
}

impl WgmmaSource {
    /// The CUDA source of this configuration with the crate's kernel.
    pub fn source(&self) -> String {
        self.source_with(KERNEL_SOURCE)
    }

    /// The CUDA source of this configuration with `kernel` in place of the crate's
    /// `wgmma_linear.cu` (a benchmark comparing an edited copy).
    pub fn source_with(&self, kernel: &str) -> String {
        let (elem, elem2, pack, to_f32, ptx) = match self.elem {
            WgmmaElem::Bf16 => (
                "__nv_bfloat16",
                "__nv_bfloat162",
                "__floats2bfloat162_rn",
                "__bfloat162float",
                "bf16",
            ),
            WgmmaElem::F16 => (
                "__half",
                "__half2",
                "__floats2half2_rn",
                "__half2float",
                "f16",
            ),
            WgmmaElem::Tf32 => ("float", "float2", "make_float2", "", "tf32"),
        };
        // An f32 rounded to ELEM and back: where Burn's ops store their results.
        let round = match self.elem {
            WgmmaElem::Bf16 => "__bfloat162float(__float2bfloat16_rn(v))",
            WgmmaElem::F16 => "__half2float(__float2half_rn(v))",
            WgmmaElem::Tf32 => "(v)",
        };
        let tiling = self.tiling;
        // NVRTC has no cuda.h; a benchmark built with nvcc has it, and its CUtensorMap.
        let mut preamble = Preamble::new()
            .code(
                "#ifndef __cuda_cuda_h__
                 typedef struct CUtensorMap_st { alignas(64) unsigned long long int opaque[16]; } CUtensorMap;
                 #endif
",
            )
            .define("ELEM", elem)
            .define("ELEM2", elem2)
            .define("PACK2", pack)
            .define("TO_F32", to_f32)
            .define("ROUND(v)", round)
            .define("ESIZE", self.elem.size())
            .define("BN", tiling.bn)
            .define("STAGES", tiling.stages)
            .define("GROUP_M", tiling.group_m);
        if tiling.pingpong {
            preamble = preamble
                .define("PINGPONG", 1)
                .define("MH", tiling.rows / 64);
        }
        preamble
            .define("A_M_MAJOR", self.a_m_major as u32)
            .define("B_K_MAJOR", self.b_k_major as u32)
            .define("TMA_STORE", tiling.tma_store as u32)
            .define("SUB", tiling.store_cols)
            .define("ACT", format_args!("{}u", self.activation.code()))
            .define("GATE", format_args!("{}u", self.gate.code()))
            .define("DROPOUT", self.dropout as u32)
            .define("PRODUCT", self.product as u32)
            .define(
                "GATE_ELEM",
                match self.bool_gate_bytes {
                    1 => "unsigned char",
                    4 => "unsigned int",
                    _ => "ELEM",
                },
            )
            .code(&wgmma_step(tiling.bn, ptx, self.a_m_major, !self.b_k_major))
            .code(PTX_HELPERS)
            .finish(kernel)
    }
}

#[cfg(feature = "cuda")]
impl crate::kernel::cuda::CudaSource for WgmmaSource {
    const ENTRY_POINT: &'static str = "hypatia_wgmma_linear";
    const DEBUG_NAME: &'static str = "hypatia::kernel::hopper::wgmma_linear";

    fn threads(&self) -> u32 {
        THREADS
    }

    fn shared_bytes(&self) -> usize {
        self.tiling.shared_bytes(self.elem.size())
    }

    fn source(&self) -> String {
        WgmmaSource::source(self)
    }
}

/// `d += A·B` for one step of an m64n`bn` tile (k16 for 16-bit types, k8 for tf32: 32 bytes of
/// k either way): the inline-PTX wrapper, one `"+f"` operand per accumulator register. tf32
/// takes no transpose operands (both K-major).
fn wgmma_step(bn: u32, ptx_type: &str, transpose_a: bool, transpose_b: bool) -> String {
    let regs = bn / 2;
    let outs = (0..regs)
        .map(|i| format!("%{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let operands = (0..regs)
        .map(|i| format!("\"+f\"(d[{i}])"))
        .collect::<Vec<_>>()
        .join(", ");
    let (k, transposes) = match ptx_type {
        "tf32" => {
            assert!(!transpose_a && !transpose_b, "tf32 wgmma is K-major only");
            (8, String::new())
        }
        _ => (
            16,
            format!(", {}, {}", transpose_a as u32, transpose_b as u32),
        ),
    };
    format!(
        "__device__ __forceinline__ void wgmma_step(float (&d)[{regs}], u64 desc_a, u64 desc_b) {{\n\
         asm volatile(\"{{ .reg .pred p; setp.ne.b32 p, %{scale}, 0; \
         wgmma.mma_async.sync.aligned.m64n{bn}k{k}.f32.{ptx_type}.{ptx_type} \
         {{{outs}}}, %{regs}, %{b}, p, 1, 1{transposes}; }}\"\n\
         : {operands}\n\
         : \"l\"(desc_a), \"l\"(desc_b), \"r\"(1));\n}}\n",
        b = regs + 1,
        scale = regs + 2,
    )
}

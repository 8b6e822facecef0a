//! [`TensorLang`]: the ops Hypatia reasons about, as an egg language.

use egg::{Id, define_language};
use std::fmt;
use std::str::FromStr;

define_language! {
    /// Tensor ops of a captured window, plus the fused forms the rules introduce.
    ///
    /// ```
    /// use hypatia::rewrite::TensorLang;
    /// let expr: egg::RecExpr<TensorLang> =
    ///     "(relu (add (matmul t1:f32:1x2 t2:f32:2x3) (reshape t3:f32:3 shape:0x3)))".parse().unwrap();
    /// assert_eq!(expr.as_ref().len(), 8);
    /// ```
    pub enum TensorLang {
        "matmul" = Matmul([Id; 2]),
        "add" = Add([Id; 2]),
        "reshape" = Reshape([Id; 2]),
        "swap-dims" = SwapDims([Id; 2]),
        "le" = LowerEqualElem([Id; 2]),
        "lt" = LowerElem([Id; 2]),
        "lower" = Lower([Id; 2]),
        "mask-fill" = MaskFill([Id; 3]),
        "mask-where" = MaskWhere([Id; 3]),
        "zeros" = Zeros(Id),
        "full" = Full([Id; 2]),
        "relu" = Relu(Id),
        "linear" = Linear([Id; 3]),
        "fused-linear-relu" = FusedLinearRelu([Id; 3]),
        "fused-matmul" = FusedMatmul([Id; 2]),
        "fused-matmul-relu-grad" = FusedMatmulReluGrad([Id; 3]),
        // `gelu-grad(gate) · (x · w)`: x, w, the gate, then the gelu-grad's scalars.
        "fused-matmul-gelu-grad" = FusedMatmulGeluGrad([Id; 12]),
        // The two above on a gradient that came back through dropout: x, w, the gate, the
        // mask, the gate's scalars, then dropout's scale.
        "fused-matmul-relu-grad-dropout" = FusedMatmulReluGradDropout([Id; 5]),
        "fused-matmul-gelu-grad-dropout" = FusedMatmulGeluGradDropout([Id; 14]),
        // SiLU's backward: x, w, the gate (the forward's pre-activation), its saved sigmoid,
        // then the scalars of `Epilogue::SiluGrad`'s constants.
        "fused-matmul-silu-grad" = FusedMatmulSiluGrad([Id; 9]),
        // Tanh GELU's backward: x, w, the gate (the forward's pre-activation), its saved
        // `tanh + 1`, the saved tanh input, then the scalars of `Epilogue::GeluTanhGrad`'s
        // constants.
        "fused-matmul-gelu-tanh-grad" = FusedMatmulGeluTanhGrad([Id; 11]),
        // LeakyReLU's backward: x, w, the gate (the forward's saved bool mask `pre < 0`), then
        // the slope.
        "fused-matmul-leaky-relu-grad" = FusedMatmulLeakyReluGrad([Id; 4]),
        // SwiGLU's gate-projection backward: x, w, the gate (the forward's pre-activation), its
        // saved sigmoid, the up projection, then the scalars of `Epilogue::SwigluGrad`'s
        // constants.
        "fused-matmul-swiglu-grad" = FusedMatmulSwigluGrad([Id; 10]),
        // Elementwise ops of Burn's activations (their scalars are children).
        "mul" = Mul([Id; 2]),
        "mul-scalar" = MulScalar([Id; 2]),
        "div-scalar" = DivScalar([Id; 2]),
        "add-scalar" = AddScalar([Id; 2]),
        "powf-scalar" = PowfScalar([Id; 2]),
        "erf" = Erf(Id),
        "tanh" = Tanh(Id),
        "exp" = Exp(Id),
        "log" = Log(Id),
        "cast" = Cast([Id; 2]),
        "clamp" = Clamp([Id; 3]),
        // Activations as the rules recognise them: the input, then the scalars of Burn's form
        // in the order of `Epilogue::constants`, then its run-time parameters.
        "gelu" = Gelu([Id; 4]),
        "gelu-tanh" = GeluTanh([Id; 6]),
        "silu" = Silu([Id; 4]),
        "leaky-relu" = LeakyRelu([Id; 3]),
        // GELU's derivative as Burn's `gelu_backward` computes it from the pre-activation:
        // the pre-activation, then the scalars of `Epilogue::GeluGrad`'s constants.
        "gelu-grad" = GeluGrad([Id; 10]),
        // Burn's sigmoid of x (`exp(-log(exp(-x) + 1))` in f32, cast back): x, then the
        // scalars of the two `neg`s and the `1` between them.
        "sigmoid" = Sigmoid([Id; 4]),
        // The bias of a Linear without one (`linear ?x ?w no-bias` is a matmul).
        "no-bias" = NoBias([Id; 0]),
        // Fused Linear + activation: x, w, bias (or no-bias), then the activation's scalars.
        "fused-linear" = FusedLinear([Id; 3]),
        "fused-linear-gelu" = FusedLinearGelu([Id; 6]),
        "fused-linear-gelu-tanh" = FusedLinearGeluTanh([Id; 8]),
        "fused-linear-silu" = FusedLinearSilu([Id; 6]),
        "fused-linear-leaky-relu" = FusedLinearLeakyRelu([Id; 5]),
        // SwiGLU's forward `silu(x · w + bias) ⊙ (x · u)`: x, w, bias, the up projection's
        // weight u, then SiLU's scalars.
        "fused-linear-swiglu" = FusedLinearSwiglu([Id; 7]),
        "fused-linear-clamp" = FusedLinearClamp([Id; 5]),
        // A fused Linear (+ ReLU) run in the same launch as the fused Linear producing its
        // input, the hidden activation kept on chip (the MLP-chain kernel): x, w, bias.
        "chain-linear-relu" = ChainLinearRelu([Id; 3]),
        "chain-linear" = ChainLinear([Id; 3]),
        Tensor(TensorLeaf),
        Shape(ShapeLeaf),
        Scalar(ScalarLeaf),
        Dims(DimsLeaf),
        ElemOf(ElemLeaf),
    }
}

impl TensorLang {
    /// The epilogue and the children (`x`, `w`, bias, then scalars; the gate of a backward
    /// as the bias, dropout's mask or SiLU's saved sigmoid after it) of a fused node, `None` for any other node.
    pub fn fused(&self) -> Option<(crate::kernel::Epilogue, &[Id])> {
        use crate::kernel::Epilogue;
        let epilogue = match self {
            TensorLang::FusedLinearRelu(_) | TensorLang::ChainLinearRelu(_) => Epilogue::Relu,
            TensorLang::FusedMatmul(_)
            | TensorLang::FusedLinear(_)
            | TensorLang::ChainLinear(_) => Epilogue::Identity,
            TensorLang::FusedMatmulReluGrad(_) => Epilogue::ReluGrad,
            TensorLang::FusedMatmulGeluGrad(_) => Epilogue::GeluGrad,
            TensorLang::FusedMatmulReluGradDropout(_) => Epilogue::ReluGradDropout,
            TensorLang::FusedMatmulGeluGradDropout(_) => Epilogue::GeluGradDropout,
            TensorLang::FusedMatmulSiluGrad(_) => Epilogue::SiluGrad,
            TensorLang::FusedMatmulGeluTanhGrad(_) => Epilogue::GeluTanhGrad,
            TensorLang::FusedMatmulLeakyReluGrad(_) => Epilogue::LeakyReluGrad,
            TensorLang::FusedMatmulSwigluGrad(_) => Epilogue::SwigluGrad,
            TensorLang::FusedLinearGelu(_) => Epilogue::Gelu,
            TensorLang::FusedLinearGeluTanh(_) => Epilogue::GeluTanh,
            TensorLang::FusedLinearSilu(_) => Epilogue::Silu,
            TensorLang::FusedLinearLeakyRelu(_) => Epilogue::LeakyRelu,
            TensorLang::FusedLinearSwiglu(_) => Epilogue::Swiglu,
            TensorLang::FusedLinearClamp(_) => Epilogue::Clamp,
            _ => return None,
        };
        Some((epilogue, egg::Language::children(self)))
    }

    /// Whether this is a `chain-*` node: a layer that joins the launch of the fused layer
    /// producing its input.
    pub fn is_chained(&self) -> bool {
        matches!(
            self,
            TensorLang::ChainLinearRelu(_) | TensorLang::ChainLinear(_)
        )
    }

    /// Whether this node is a fused forward layer whose output a chain layer may take as input
    /// (a Linear with ReLU or without activation, fused or itself chained).
    pub fn is_chain_layer(&self) -> bool {
        matches!(
            self,
            TensorLang::FusedLinearRelu(_)
                | TensorLang::FusedLinear(_)
                | TensorLang::ChainLinearRelu(_)
                | TensorLang::ChainLinear(_)
        )
    }
}

/// Element type of a tensor leaf, as far as rewriting cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Elem {
    /// 64-bit float.
    F64,
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// Booleans (masks).
    Bool,
    /// Anything else (ints, quantized).
    Other,
}

impl Elem {
    /// Maps Burn's dtype.
    pub fn from_dtype(dtype: burn_backend::DType) -> Self {
        use burn_backend::DType;
        match dtype {
            DType::F64 => Elem::F64,
            DType::F32 | DType::Flex32 => Elem::F32,
            DType::F16 => Elem::F16,
            DType::BF16 => Elem::BF16,
            DType::Bool(_) => Elem::Bool,
            _ => Elem::Other,
        }
    }

    /// Whether the fused kernel supports this input type.
    pub fn is_kernel_float(&self) -> bool {
        matches!(self, Elem::F32 | Elem::F16 | Elem::BF16)
    }

    fn name(&self) -> &'static str {
        match self {
            Elem::F64 => "f64",
            Elem::F32 => "f32",
            Elem::F16 => "f16",
            Elem::BF16 => "bf16",
            Elem::Bool => "bool",
            Elem::Other => "other",
        }
    }
}

impl FromStr for Elem {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Elem::F64,
            Elem::F32,
            Elem::F16,
            Elem::BF16,
            Elem::Bool,
            Elem::Other,
        ]
        .into_iter()
        .find(|e| e.name() == s)
        .ok_or_else(|| format!("unknown element type {s}"))
    }
}

/// A relative shape: each entry is a dim id, `0` meaning size 1.
pub type Dims = Vec<usize>;

fn fmt_dims(dims: &[usize], sep: &str) -> String {
    dims.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

fn parse_dims(s: &str, sep: char) -> Result<Dims, String> {
    if s.is_empty() {
        return Ok(vec![]);
    }
    s.split(sep)
        .map(|d| d.parse::<usize>().map_err(|e| format!("bad dim {d}: {e}")))
        .collect()
}

/// A tensor read by the window but not produced by an op Hypatia understands.
/// Written `t<id>:<elem>:<d0>x<d1>..`, e.g. `t7:f32:1x2`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorLeaf {
    /// Relative tensor id.
    pub id: u64,
    /// Element type.
    pub elem: Elem,
    /// Relative shape.
    pub shape: Dims,
}

impl fmt::Display for TensorLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "t{}:{}:{}",
            self.id,
            self.elem.name(),
            fmt_dims(&self.shape, "x")
        )
    }
}

impl FromStr for TensorLeaf {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix('t').ok_or("tensor leaf starts with t")?;
        let mut parts = rest.splitn(3, ':');
        let id = parts.next().ok_or("missing id")?;
        let id = id.parse().map_err(|e| format!("bad id {id}: {e}"))?;
        let elem = parts.next().ok_or("missing elem")?.parse()?;
        let shape = parse_dims(parts.next().ok_or("missing shape")?, 'x')?;
        Ok(Self { id, elem, shape })
    }
}

/// The target shape of a reshape or creation op. Written `shape:<d0>x<d1>..`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShapeLeaf(pub Dims);

impl fmt::Display for ShapeLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shape:{}", fmt_dims(&self.0, "x"))
    }
}

impl FromStr for ShapeLeaf {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let dims = s
            .strip_prefix("shape:")
            .ok_or("shape leaf starts with shape:")?;
        Ok(Self(parse_dims(dims, 'x')?))
    }
}

/// A relative scalar id; its value is only known at run time. Written `scalar:<id>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScalarLeaf(pub u64);

impl fmt::Display for ScalarLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scalar:{}", self.0)
    }
}

impl FromStr for ScalarLeaf {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let id = s
            .strip_prefix("scalar:")
            .ok_or("scalar leaf starts with scalar:")?;
        Ok(Self(
            id.parse().map_err(|e| format!("bad scalar id {id}: {e}"))?,
        ))
    }
}

/// The element type a cast produces. Written `elem:<type>`, e.g. `elem:f32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ElemLeaf(pub Elem);

impl fmt::Display for ElemLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "elem:{}", self.0.name())
    }
}

impl FromStr for ElemLeaf {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let elem = s
            .strip_prefix("elem:")
            .ok_or("elem leaf starts with elem:")?;
        Ok(Self(elem.parse()?))
    }
}

/// The two dims of a swap. Written `dims:<a>,<b>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DimsLeaf(pub usize, pub usize);

impl fmt::Display for DimsLeaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dims:{},{}", self.0, self.1)
    }
}

impl FromStr for DimsLeaf {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let dims = parse_dims(
            s.strip_prefix("dims:")
                .ok_or("dims leaf starts with dims:")?,
            ',',
        )?;
        match dims[..] {
            [a, b] => Ok(Self(a, b)),
            _ => Err(format!("dims leaf needs two dims: {s}")),
        }
    }
}

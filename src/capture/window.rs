//! The window of ops a fuser has been fed.

use burn_ir::{
    BaseOperationIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr, TensorId,
    TensorIr, TensorStatus,
};
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// The op kinds Hypatia reasons about; everything else is [`OpKind::Opaque`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `float_matmul(lhs, rhs)`.
    Matmul,
    /// `float_add(lhs, rhs)`, broadcasting.
    Add,
    /// `float_reshape(input)`; the target shape is the output's.
    Reshape,
    /// `float_swap_dims(input, dim1, dim2)`.
    SwapDims {
        /// First dim.
        dim1: usize,
        /// Second dim.
        dim2: usize,
    },
    /// `float_lower_equal_elem(lhs, scalar)` (relu's mask).
    LowerEqualElem,
    /// `float_lower_elem(lhs, scalar)` (clamp_min's mask).
    LowerElem,
    /// `float_lower(lhs, rhs)` (max_pair's mask).
    Lower,
    /// `float_mask_fill(tensor, mask, scalar)`.
    MaskFill,
    /// `float_mask_where(tensor, mask, value)`.
    MaskWhere,
    /// `float_zeros(shape)`.
    Zeros,
    /// `float_full(shape, scalar)`.
    Full,
    /// `float_mul(lhs, rhs)`, broadcasting (GELU's and SiLU's `x · f(x)`).
    Mul,
    /// `float_mul_scalar(lhs, scalar)` (also Burn's `float_neg`, a multiply by -1).
    MulScalar,
    /// `float_div_scalar(lhs, scalar)`.
    DivScalar,
    /// `float_add_scalar(lhs, scalar)`.
    AddScalar,
    /// `float_powf_scalar(lhs, scalar)`.
    PowfScalar,
    /// `float_erf(input)`.
    Erf,
    /// `float_tanh(input)`.
    Tanh,
    /// `float_exp(input)`.
    Exp,
    /// `float_log(input)`.
    Log,
    /// `float_cast(input)`; the target type is the output's.
    Cast,
    /// `float_clamp(tensor, min, max)`.
    Clamp,
    /// `float_sum_dim(input, axis)`: a bias gradient. Not rewritten (it is a leaf where read),
    /// but it keeps the window open: in a backward pass it sits between the matmuls and the
    /// relu mask that fuse with them. The planner lets a relu-backward step produce it (see
    /// [`crate::plan::BiasGrad`]).
    SumDim {
        /// The summed dim (kept, with size 1).
        axis: usize,
    },
    /// Ops that compute nothing: a tensor registered from host data (`Init`), a `Drop`.
    /// They may sit anywhere in a block (Burn records `from_data` lazily) and are run as Burn's.
    Bookkeeping,
    /// `float_random(shape, distribution)`: a tensor made from no other, run as Burn's op (the
    /// same draw from Burn's generator). A window holds one only after a matmul of its own and
    /// where the op after it reads it as a matmul's operand or views it: a parameter burn-nn
    /// initialises at its first use, such as `nn::SwiGlu`'s up-projection weight made between
    /// SiLU and `x · W₃`.
    Source,
    /// Any op Hypatia does not understand.
    Opaque,
}

impl OpKind {
    /// Whether a Linear+activation pattern can contain this kind: the fuser stays open only
    /// while such ops arrive.
    pub fn is_pattern_kind(&self) -> bool {
        !matches!(self, OpKind::Opaque)
    }

    /// Whether lowering turns the op into an e-graph node (the others' outputs are leaves).
    pub fn is_lowered(&self) -> bool {
        !matches!(
            self,
            OpKind::Opaque | OpKind::Bookkeeping | OpKind::Source | OpKind::SumDim { .. }
        )
    }

    /// How many scalars the op reads; lowering skips an op whose scalars are literals (an
    /// absolute op), since rules and plans refer to scalars by relative id.
    pub fn scalar_count(&self) -> usize {
        match self {
            OpKind::LowerEqualElem
            | OpKind::LowerElem
            | OpKind::MaskFill
            | OpKind::Full
            | OpKind::MulScalar
            | OpKind::DivScalar
            | OpKind::AddScalar
            | OpKind::PowfScalar => 1,
            OpKind::Clamp => 2,
            _ => 0,
        }
    }

    /// Whether the op's output can be the last op of a fused pattern: the fuser plans the
    /// window after each such op.
    pub fn may_end_pattern(&self) -> bool {
        matches!(
            self,
            OpKind::Matmul
                | OpKind::Add
                | OpKind::MaskFill
                | OpKind::MaskWhere
                | OpKind::Mul
                | OpKind::MulScalar
                | OpKind::DivScalar
                | OpKind::Clamp
                | OpKind::SumDim { .. }
        )
    }

    /// Ops that cost no pass over memory when run as Burn's: views and bookkeeping.
    pub fn is_free(&self) -> bool {
        matches!(
            self,
            OpKind::Reshape | OpKind::SwapDims { .. } | OpKind::Bookkeeping
        )
    }
}

/// One op of the window, classified, with its tensors in a fixed order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CapturedOp {
    /// What the op computes.
    pub kind: OpKind,
    /// Input tensors, in the op's argument order (for `MaskFill`: tensor, mask).
    pub inputs: Vec<TensorIr>,
    /// Output tensors (one for every kind Hypatia understands).
    pub outputs: Vec<TensorIr>,
    /// Relative scalar ids the op reads (for `LowerEqualElem`, `MaskFill`, `Full`, ...).
    pub scalars: Vec<u64>,
}

impl CapturedOp {
    /// Classifies one relative op.
    pub fn new(op: &OperationIr) -> Self {
        let (kind, inputs, output, scalars): (OpKind, Vec<&TensorIr>, &TensorIr, Vec<&ScalarIr>) =
            match op {
                OperationIr::Float(_, FloatOperationIr::Matmul(m)) => {
                    (OpKind::Matmul, vec![&m.lhs, &m.rhs], &m.out, vec![])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::Add(b)) => {
                    (OpKind::Add, vec![&b.lhs, &b.rhs], &b.out, vec![])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::Lower(b)) => {
                    (OpKind::Lower, vec![&b.lhs, &b.rhs], &b.out, vec![])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::LowerEqualElem(s)) => {
                    (OpKind::LowerEqualElem, vec![&s.lhs], &s.out, vec![&s.rhs])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::LowerElem(s)) => {
                    (OpKind::LowerElem, vec![&s.lhs], &s.out, vec![&s.rhs])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::SumDim(r)) => {
                    let kind = OpKind::SumDim { axis: r.axis };
                    (kind, vec![&r.input], &r.out, vec![])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::Full(f)) => {
                    (OpKind::Full, vec![], &f.out, vec![&f.value])
                }
                OperationIr::BaseFloat(BaseOperationIr::Reshape(r)) => {
                    (OpKind::Reshape, vec![&r.input], &r.out, vec![])
                }
                OperationIr::BaseFloat(BaseOperationIr::SwapDims(s)) => {
                    let kind = OpKind::SwapDims {
                        dim1: s.dim1,
                        dim2: s.dim2,
                    };
                    (kind, vec![&s.input], &s.out, vec![])
                }
                OperationIr::BaseFloat(BaseOperationIr::MaskFill(m)) => (
                    OpKind::MaskFill,
                    vec![&m.tensor, &m.mask],
                    &m.out,
                    vec![&m.value],
                ),
                OperationIr::BaseFloat(BaseOperationIr::MaskWhere(m)) => (
                    OpKind::MaskWhere,
                    vec![&m.tensor, &m.mask, &m.value],
                    &m.out,
                    vec![],
                ),
                OperationIr::BaseFloat(BaseOperationIr::Zeros(z)) => {
                    (OpKind::Zeros, vec![], &z.out, vec![])
                }
                OperationIr::BaseFloat(BaseOperationIr::Cast(c)) => {
                    (OpKind::Cast, vec![&c.input], &c.out, vec![])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::Mul(b)) => {
                    (OpKind::Mul, vec![&b.lhs, &b.rhs], &b.out, vec![])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::MulScalar(s)) => {
                    (OpKind::MulScalar, vec![&s.lhs], &s.out, vec![&s.rhs])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::DivScalar(s)) => {
                    (OpKind::DivScalar, vec![&s.lhs], &s.out, vec![&s.rhs])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::AddScalar(s)) => {
                    (OpKind::AddScalar, vec![&s.lhs], &s.out, vec![&s.rhs])
                }
                OperationIr::NumericFloat(_, NumericOperationIr::Clamp(c)) => {
                    (OpKind::Clamp, vec![&c.tensor], &c.out, vec![&c.min, &c.max])
                }
                OperationIr::Float(_, FloatOperationIr::PowfScalar(s)) => {
                    (OpKind::PowfScalar, vec![&s.lhs], &s.out, vec![&s.rhs])
                }
                OperationIr::Float(_, FloatOperationIr::Erf(u)) => {
                    (OpKind::Erf, vec![&u.input], &u.out, vec![])
                }
                OperationIr::Float(_, FloatOperationIr::Tanh(u)) => {
                    (OpKind::Tanh, vec![&u.input], &u.out, vec![])
                }
                OperationIr::Float(_, FloatOperationIr::Exp(u)) => {
                    (OpKind::Exp, vec![&u.input], &u.out, vec![])
                }
                OperationIr::Float(_, FloatOperationIr::Log(u)) => {
                    (OpKind::Log, vec![&u.input], &u.out, vec![])
                }
                OperationIr::Init(_) | OperationIr::Drop(_) => {
                    return Self::opaque(op, OpKind::Bookkeeping);
                }
                OperationIr::Float(_, FloatOperationIr::Random(_)) => {
                    return Self::opaque(op, OpKind::Source);
                }
                _ => return Self::opaque(op, OpKind::Opaque),
            };
        Self {
            kind,
            inputs: inputs.into_iter().cloned().collect(),
            outputs: vec![output.clone()],
            scalars: scalars.into_iter().filter_map(relative_scalar_id).collect(),
        }
    }

    fn opaque(op: &OperationIr, kind: OpKind) -> Self {
        Self {
            kind,
            inputs: op.inputs().cloned().collect(),
            outputs: op.outputs().cloned().collect(),
            scalars: vec![],
        }
    }

    /// The single output of an op Hypatia understands.
    pub fn out(&self) -> &TensorIr {
        &self.outputs[0]
    }

    /// Whether the op is a `Drop` (bookkeeping with no output; an `Init` has one).
    pub fn is_drop(&self) -> bool {
        self.kind == OpKind::Bookkeeping && self.outputs.is_empty()
    }
}

/// `t5:[1,2] = matmul(t3:[1,4], t4:[4,2])`: relative ids and dims, scalars as `s<id>`.
impl std::fmt::Display for CapturedOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tensor = |t: &TensorIr| {
            let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
            format!("t{}:[{}]", t.id.value(), dims.join(","))
        };
        let outputs: Vec<String> = self.outputs.iter().map(tensor).collect();
        let arguments: Vec<String> = (self.inputs.iter().map(tensor))
            .chain(self.scalars.iter().map(|s| format!("s{s}")))
            .collect();
        let name = format!("{:?}", self.kind).to_lowercase();
        let name = name.split([' ', '{']).next().unwrap_or_default();
        match outputs.is_empty() {
            true => write!(f, "{name}({})", arguments.join(", ")),
            false => write!(
                f,
                "{} = {name}({})",
                outputs.join(", "),
                arguments.join(", ")
            ),
        }
    }
}

/// In relative form every scalar is `UInt(id)`; a literal here means an absolute op.
fn relative_scalar_id(scalar: &ScalarIr) -> Option<u64> {
    match scalar {
        ScalarIr::UInt(id) => Some(*id),
        _ => None,
    }
}

/// The ops a fuser has been fed, in block order, with the producer of each tensor.
#[derive(Clone, Debug, Default)]
pub struct Window {
    ops: Vec<CapturedOp>,
    producers: HashMap<TensorId, usize>,
}

impl Window {
    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one relative op.
    pub fn push(&mut self, op: &OperationIr) {
        let captured = CapturedOp::new(op);
        for out in &captured.outputs {
            self.producers.insert(out.id, self.ops.len());
        }
        self.ops.push(captured);
    }

    /// The ops, in block order.
    pub fn ops(&self) -> &[CapturedOp] {
        &self.ops
    }

    /// Whether the window's first op that is not a free view is a matmul: every fused step
    /// begins with one, so a window that starts otherwise holds no claim. (An empty or
    /// all-views window still may.)
    pub fn starts_with_matmul(&self) -> bool {
        self.ops
            .iter()
            .find(|op| !op.kind.is_free())
            .is_none_or(|op| op.kind == OpKind::Matmul)
    }

    /// Number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no op was fed.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Index of the op producing `tensor`, if it is produced in the window.
    pub fn find_producer(&self, tensor: TensorId) -> Option<usize> {
        self.producers.get(&tensor).copied()
    }

    /// Indices of the ops that read `tensor`.
    pub fn find_readers(&self, tensor: TensorId) -> impl Iterator<Item = usize> + '_ {
        self.ops
            .iter()
            .enumerate()
            .filter(move |(_, op)| op.inputs.iter().any(|t| t.id == tensor))
            .map(|(index, _)| index)
    }

    /// The status of `tensor` at its last read among `ops` (indices into the window).
    pub fn find_last_status(&self, tensor: TensorId, ops: &[usize]) -> Option<TensorStatus> {
        let mut sorted = ops.to_vec();
        sorted.sort_unstable();
        sorted.iter().rev().find_map(|&index| {
            self.ops[index]
                .inputs
                .iter()
                .rev()
                .find(|t| t.id == tensor)
                .map(|t| t.status)
        })
    }

    /// The window in canonical form: without its stray drops, tensors and dims renumbered in
    /// order of first appearance.
    ///
    /// A stray drop frees a tensor no other op of the window touches (autodiff and the
    /// optimizer free a step's temporaries in an order that varies from step to step). It
    /// cannot change a plan, but it shifts the relative ids burn-fusion gives every later
    /// tensor and dim. Planning the canonical form lets all such windows share one cache entry.
    /// A fuser builds it op by op with [`Canonical::push`] as the window grows.
    pub fn canonical(&self) -> Canonical {
        let mut canonical = Canonical::new();
        for (index, op) in self.ops.iter().enumerate() {
            canonical.push(index, op);
        }
        canonical
    }
}

/// A window in canonical form (see [`Window::canonical`]), with the way back.
#[derive(Clone, Debug)]
pub struct Canonical {
    /// The canonical window.
    pub window: Window,
    /// `ops[i]`: the window index of canonical op `i` (increasing).
    pub ops: Vec<usize>,
    /// The window's id of each canonical tensor id.
    pub tensors: HashMap<TensorId, TensorId>,
    /// The canonical id of each window tensor seen so far.
    ids: HashMap<TensorId, TensorId>,
    /// The canonical id of each window dim seen so far.
    dims: HashMap<usize, usize>,
    /// Hash of the canonical ops so far, so a cache key costs no pass over the window.
    hasher: DefaultHasher,
}

impl Default for Canonical {
    fn default() -> Self {
        Self::new()
    }
}

impl Canonical {
    /// The canonical form of an empty window.
    pub fn new() -> Self {
        Self {
            window: Window::new(),
            ops: Vec::new(),
            tensors: HashMap::new(),
            ids: HashMap::new(),
            // burn-fusion gives dim 1 the relative id 0; keep it, the planner reads it as 1.
            dims: HashMap::from([(0, 0)]),
            hasher: DefaultHasher::new(),
        }
    }

    /// Adds window op `index` (ops are pushed in window order).
    ///
    /// A drop of a tensor not seen before is stray: a dropped tensor is never read again, so
    /// no other op of the window can touch it.
    pub fn push(&mut self, index: usize, op: &CapturedOp) {
        let stray = op.is_drop() && op.inputs.iter().all(|t| !self.ids.contains_key(&t.id));
        if stray {
            return;
        }
        let mut op = op.clone();
        for tensor in op.inputs.iter_mut().chain(op.outputs.iter_mut()) {
            *tensor = self.rename(tensor);
        }
        op.hash(&mut self.hasher);
        for out in &op.outputs {
            self.window.producers.insert(out.id, self.window.ops.len());
        }
        self.window.ops.push(op);
        self.ops.push(index);
    }

    fn rename(&mut self, tensor: &TensorIr) -> TensorIr {
        let next = TensorId::new(self.ids.len() as u64);
        let id = *self.ids.entry(tensor.id).or_insert_with(|| {
            self.tensors.insert(next, tensor.id);
            next
        });
        let shape: Vec<usize> = tensor
            .shape
            .iter()
            .map(|dim| {
                let next = self.dims.len();
                *self.dims.entry(*dim).or_insert(next)
            })
            .collect();
        TensorIr {
            id,
            shape: shape.into(),
            ..tensor.clone()
        }
    }

    /// A cache key for the canonical ops planned with `options`: equal windows and options
    /// give equal keys.
    pub fn key(&self, options: impl Hash) -> u64 {
        let mut hasher = self.hasher.clone();
        options.hash(&mut hasher);
        hasher.finish()
    }

    /// The window's id of canonical tensor `id`.
    pub fn tensor(&self, id: TensorId) -> TensorId {
        self.tensors[&id]
    }
}

//! IR fixtures: build the exact relative `OperationIr`s Burn 0.21 emits, for tests and benches.
//!
//! ```
//! use hypatia::capture::fixtures::IrBuilder;
//! let mut ir = IrBuilder::new();
//! let (x, w, b) = (ir.input(&[17, 33]), ir.param(&[33, 65]), ir.param(&[65]));
//! let y = ir.linear(x, w, Some(b));
//! let y = ir.relu(y);
//! let window = ir.window(&[y]);
//! assert_eq!(window.len(), 5); // matmul, reshape(bias), add, lower_equal_elem, mask_fill
//! ```

use super::Window;
use burn_backend::{DType, Shape};
use burn_ir::{
    BaseOperationIr, BinaryOpIr, CastOpIr, ClampOpIr, CreationOpIr, FloatOperationIr, FullOpIr,
    MaskFillOpIr, MaskWhereOpIr, MatmulOpIr, NumericOperationIr, OperationIr, ReduceDimOpIr,
    ScalarIr, ScalarOpIr, ShapeOpIr, SwapDimsOpIr, TensorId, TensorIr, TensorStatus, UnaryOpIr,
};
use std::collections::HashMap;

impl Default for IrBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// A tensor of a fixture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct T(pub u64);

#[derive(Clone, Copy)]
enum Node {
    Matmul(T, T),
    Add(T, T),
    Reshape(T),
    SwapDims(T, usize, usize),
    LowerEqualElem(T, u64),
    LowerElem(T, u64),
    Lower(T, T),
    MaskFill(T, T, u64),
    MaskWhere(T, T, T),
    Zeros,
    Full(u64),
    Unary(Unary, T),
    Scalar(ScalarKind, T, u64),
    Mul(T, T),
    Cast(T),
    Clamp(T, u64, u64),
    SumDim(T, usize),
}

#[derive(Clone, Copy)]
enum Unary {
    Exp,
    Log,
    Erf,
    Tanh,
}

#[derive(Clone, Copy)]
enum ScalarKind {
    Mul,
    Div,
    Add,
    Powf,
}

/// Builds a window op by op, then assigns statuses as burn-fusion would.
pub struct IrBuilder {
    shapes: Vec<Vec<usize>>,
    dtypes: Vec<DType>,
    kept: Vec<bool>,
    ops: Vec<(Node, T)>,
    scalars: u64,
    dtype: DType,
}

impl IrBuilder {
    /// An empty builder making f32 tensors.
    pub fn new() -> Self {
        Self {
            shapes: Vec::new(),
            dtypes: Vec::new(),
            kept: Vec::new(),
            ops: Vec::new(),
            scalars: 0,
            dtype: DType::F32,
        }
    }

    /// Tensors made from now on have `dtype`.
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    fn tensor(&mut self, shape: &[usize], dtype: DType, kept: bool) -> T {
        self.shapes.push(shape.to_vec());
        self.dtypes.push(dtype);
        self.kept.push(kept);
        T(self.shapes.len() as u64 - 1)
    }

    fn op(&mut self, node: Node, shape: &[usize], dtype: DType) -> T {
        let out = self.tensor(shape, dtype, false);
        self.ops.push((node, out));
        out
    }

    fn scalar(&mut self) -> u64 {
        self.scalars += 1;
        self.scalars - 1
    }

    fn shape(&self, t: T) -> Vec<usize> {
        self.shapes[t.0 as usize].clone()
    }

    /// An input consumed by the window (read-write at its last read).
    pub fn input(&mut self, shape: &[usize]) -> T {
        self.tensor(shape, self.dtype, false)
    }

    /// A parameter: still held after the window (read-only at every read).
    pub fn param(&mut self, shape: &[usize]) -> T {
        self.tensor(shape, self.dtype, true)
    }

    /// Marks `t` as read again after the window (autodiff keeps relu's input, for example).
    pub fn keep(&mut self, t: T) {
        self.kept[t.0 as usize] = true;
    }

    /// `float_matmul`.
    pub fn matmul(&mut self, lhs: T, rhs: T) -> T {
        let (l, r) = (self.shape(lhs), self.shape(rhs));
        let mut shape: Vec<usize> = l[..l.len() - 1].to_vec();
        shape.push(r[r.len() - 1]);
        self.op(Node::Matmul(lhs, rhs), &shape, self.dtype)
    }

    /// `Tensor::matmul`: for `[.., B, 1, K] @ [.., 1, K, N]` Burn swaps the batch dim into the
    /// rows (`swap_dims`, `float_matmul`, `swap_dims`); otherwise a plain `float_matmul`.
    pub fn tensor_matmul(&mut self, lhs: T, rhs: T) -> T {
        let (l, r) = (self.shape(lhs), self.shape(rhs));
        let rank = l.len();
        if rank >= 3 && l[rank - 2] == 1 && r[r.len() - 3] == 1 {
            let swapped = self.swap_dims(lhs, rank - 3, rank - 2);
            let out = self.matmul(swapped, rhs);
            return self.swap_dims(out, rank - 3, rank - 2);
        }
        self.matmul(lhs, rhs)
    }

    /// `float_add` (broadcasting).
    pub fn add(&mut self, lhs: T, rhs: T) -> T {
        let (l, r) = (self.shape(lhs), self.shape(rhs));
        let shape = if l.len() >= r.len() && l.iter().product::<usize>() >= r.iter().product() {
            l
        } else {
            r
        };
        self.op(Node::Add(lhs, rhs), &shape, self.dtype)
    }

    /// `float_reshape`.
    pub fn reshape(&mut self, t: T, shape: &[usize]) -> T {
        self.op(Node::Reshape(t), shape, self.dtype)
    }

    /// `float_swap_dims`.
    pub fn swap_dims(&mut self, t: T, dim1: usize, dim2: usize) -> T {
        let mut shape = self.shape(t);
        shape.swap(dim1, dim2);
        self.op(Node::SwapDims(t, dim1, dim2), &shape, self.dtype)
    }

    fn unary(&mut self, op: Unary, t: T) -> T {
        let shape = self.shape(t);
        self.op(Node::Unary(op, t), &shape, self.dtypes[t.0 as usize])
    }

    fn scalar_op(&mut self, op: ScalarKind, t: T) -> T {
        let shape = self.shape(t);
        let s = self.scalar();
        self.op(Node::Scalar(op, t, s), &shape, self.dtypes[t.0 as usize])
    }

    /// `float_exp`.
    pub fn exp(&mut self, t: T) -> T {
        self.unary(Unary::Exp, t)
    }

    /// `float_mul` of two tensors of one shape.
    pub fn mul(&mut self, lhs: T, rhs: T) -> T {
        let shape = self.shape(lhs);
        self.op(Node::Mul(lhs, rhs), &shape, self.dtypes[lhs.0 as usize])
    }

    /// `float_mul_scalar` (a fresh scalar id).
    pub fn mul_scalar(&mut self, t: T) -> T {
        self.scalar_op(ScalarKind::Mul, t)
    }

    /// `float_cast` to `dtype`.
    pub fn cast(&mut self, t: T, dtype: DType) -> T {
        let shape = self.shape(t);
        self.op(Node::Cast(t), &shape, dtype)
    }

    /// `float_clamp(x, min, max)`.
    pub fn clamp(&mut self, x: T) -> T {
        let shape = self.shape(x);
        let (min, max) = (self.scalar(), self.scalar());
        self.op(Node::Clamp(x, min, max), &shape, self.dtypes[x.0 as usize])
    }

    /// Burn's `gelu`: `div_scalar(mul(x, add_scalar(erf(div_scalar(x, √2)), 1)), 2)`.
    pub fn gelu(&mut self, x: T) -> T {
        let t = self.scalar_op(ScalarKind::Div, x);
        let t = self.unary(Unary::Erf, t);
        let t = self.scalar_op(ScalarKind::Add, t);
        let t = self.mul(x, t);
        self.scalar_op(ScalarKind::Div, t)
    }

    /// Burn's `gelu_approximate`:
    /// `mul_scalar(mul(x, add_scalar(tanh(mul_scalar(add(x, mul_scalar(powf_scalar(x, 3))))))))`.
    pub fn gelu_tanh(&mut self, x: T) -> T {
        let cube = self.scalar_op(ScalarKind::Powf, x);
        let cube = self.scalar_op(ScalarKind::Mul, cube);
        let inner = self.add(x, cube);
        let inner = self.scalar_op(ScalarKind::Mul, inner);
        let t = self.unary(Unary::Tanh, inner);
        let t = self.scalar_op(ScalarKind::Add, t);
        let t = self.mul(x, t);
        self.scalar_op(ScalarKind::Mul, t)
    }

    /// Burn's `silu`: `mul(x, sigmoid(x))`, sigmoid computed in f32 and cast back:
    /// `cast(exp(neg(log(add_scalar(exp(neg(cast(x, f32))), 1)))))`, `neg` a multiply by -1.
    pub fn silu(&mut self, x: T) -> T {
        let dtype = self.dtypes[x.0 as usize];
        let t = self.cast(x, DType::F32);
        let t = self.scalar_op(ScalarKind::Mul, t);
        let t = self.unary(Unary::Exp, t);
        let t = self.scalar_op(ScalarKind::Add, t);
        let t = self.unary(Unary::Log, t);
        let t = self.scalar_op(ScalarKind::Mul, t);
        let t = self.unary(Unary::Exp, t);
        let t = self.cast(t, dtype);
        self.mul(x, t)
    }

    /// Burn's `leaky_relu`: `mask_where(x, lower_elem(x, 0), mul_scalar(x, slope))`.
    pub fn leaky_relu(&mut self, x: T) -> T {
        let shape = self.shape(x);
        let s = self.scalar();
        let mask = self.op(
            Node::LowerElem(x, s),
            &shape,
            DType::Bool(burn_backend::BoolStore::Native),
        );
        let scaled = self.scalar_op(ScalarKind::Mul, x);
        self.op(Node::MaskWhere(x, mask, scaled), &shape, self.dtype)
    }

    /// Burn's `relu`: `mask_fill(x, lower_equal_elem(x, 0), 0)`.
    pub fn relu(&mut self, x: T) -> T {
        let shape = self.shape(x);
        let s = self.scalar();
        let mask = self.op(
            Node::LowerEqualElem(x, s),
            &shape,
            DType::Bool(burn_backend::BoolStore::Native),
        );
        let fill = self.scalar();
        self.op(Node::MaskFill(x, mask, fill), &shape, self.dtype)
    }

    /// `float_sum_dim(t, axis)`: the dim is kept, with size 1 (a bias gradient's sum).
    pub fn sum_dim(&mut self, t: T, axis: usize) -> T {
        let mut shape = self.shape(t);
        shape[axis] = 1;
        self.op(Node::SumDim(t, axis), &shape, self.dtypes[t.0 as usize])
    }

    /// `mask_fill(x, mask, 0)` with a mask computed elsewhere.
    pub fn mask_fill(&mut self, x: T, mask: T) -> T {
        let shape = self.shape(x);
        let fill = self.scalar();
        self.op(Node::MaskFill(x, mask, fill), &shape, self.dtype)
    }

    /// `lower_equal_elem(x, 0)`: a mask.
    pub fn lower_equal_zero(&mut self, x: T) -> T {
        let shape = self.shape(x);
        let s = self.scalar();
        self.op(
            Node::LowerEqualElem(x, s),
            &shape,
            DType::Bool(burn_backend::BoolStore::Native),
        )
    }

    /// Burn's `clamp_min(x, 0)`: `mask_fill(x, lower_elem(x, 0), 0)`.
    pub fn clamp_min(&mut self, x: T) -> T {
        let shape = self.shape(x);
        let s = self.scalar();
        let mask = self.op(
            Node::LowerElem(x, s),
            &shape,
            DType::Bool(burn_backend::BoolStore::Native),
        );
        let fill = self.scalar();
        self.op(Node::MaskFill(x, mask, fill), &shape, self.dtype)
    }

    /// Burn's `max_pair(x, zeros)`: `mask_where(x, lower(x, z), z)`, `z` made by `zeros`
    /// (or `full(0)` when `full` is set).
    pub fn max_pair_zeros(&mut self, x: T, full: bool) -> T {
        let shape = self.shape(x);
        let node = if full {
            Node::Full(self.scalar())
        } else {
            Node::Zeros
        };
        let zeros = self.op(node, &shape, self.dtype);
        let mask = self.op(
            Node::Lower(x, zeros),
            &shape,
            DType::Bool(burn_backend::BoolStore::Native),
        );
        self.op(Node::MaskWhere(x, mask, zeros), &shape, self.dtype)
    }

    /// `nn::Linear` as Burn 0.21's default `ModuleOps::linear` emits it: weight and bias
    /// unsqueezed to x's rank (a reshape only when the rank grows), matmul, then add.
    pub fn linear(&mut self, x: T, w: T, bias: Option<T>) -> T {
        let rank = self.shape(x).len();
        let unsqueeze = |b: &mut Self, t: T| {
            let shape = b.shape(t);
            if shape.len() >= rank {
                return t;
            }
            let mut target = vec![1; rank - shape.len()];
            target.extend(shape);
            b.reshape(t, &target)
        };
        let w = unsqueeze(self, w);
        let out = self.matmul(x, w);
        match bias {
            Some(b) => {
                let b = unsqueeze(self, b);
                self.add(out, b)
            }
            None => out,
        }
    }

    /// The relative ops, with statuses: read-only where the tensor is read again (later in
    /// the window, or after it for params, kept tensors and `outputs`), read-write at the last read.
    pub fn ops(&self, outputs: &[T]) -> Vec<OperationIr> {
        let mut last_read: HashMap<u64, usize> = HashMap::new();
        for (index, (node, _)) in self.ops.iter().enumerate() {
            for t in node_inputs(node) {
                last_read.insert(t.0, index);
            }
        }
        let mut dims: HashMap<usize, usize> = HashMap::from([(1, 0)]);
        let mut relative = |shape: &[usize]| -> Shape {
            Shape::from(
                shape
                    .iter()
                    .map(|d| {
                        let next = dims.len();
                        *dims.entry(*d).or_insert(next)
                    })
                    .collect::<Vec<_>>(),
            )
        };
        let mut shapes = Vec::new();
        for shape in &self.shapes {
            shapes.push(relative(shape));
        }
        let kept = |t: T| self.kept[t.0 as usize] || outputs.contains(&t);
        let read = |t: T, index: usize| TensorIr {
            id: TensorId::new(t.0),
            shape: shapes[t.0 as usize].clone(),
            status: if last_read[&t.0] == index && !kept(t) {
                TensorStatus::ReadWrite
            } else {
                TensorStatus::ReadOnly
            },
            dtype: self.dtypes[t.0 as usize],
        };
        let write = |t: T| TensorIr {
            id: TensorId::new(t.0),
            shape: shapes[t.0 as usize].clone(),
            status: TensorStatus::NotInit,
            dtype: self.dtypes[t.0 as usize],
        };
        let scalar = |s: u64| ScalarIr::UInt(s);
        self.ops
            .iter()
            .enumerate()
            .map(|(i, &(node, out))| {
                let dtype = self.dtypes[out.0 as usize];
                let out = write(out);
                match node {
                    Node::Matmul(l, r) => OperationIr::Float(
                        dtype,
                        FloatOperationIr::Matmul(MatmulOpIr {
                            lhs: read(l, i),
                            rhs: read(r, i),
                            out,
                        }),
                    ),
                    Node::Add(l, r) => OperationIr::NumericFloat(
                        dtype,
                        NumericOperationIr::Add(BinaryOpIr {
                            lhs: read(l, i),
                            rhs: read(r, i),
                            out,
                        }),
                    ),
                    Node::Lower(l, r) => OperationIr::NumericFloat(
                        self.dtypes[l.0 as usize],
                        NumericOperationIr::Lower(BinaryOpIr {
                            lhs: read(l, i),
                            rhs: read(r, i),
                            out,
                        }),
                    ),
                    Node::SumDim(t, axis) => OperationIr::NumericFloat(
                        dtype,
                        NumericOperationIr::SumDim(ReduceDimOpIr {
                            input: read(t, i),
                            out,
                            axis,
                            accumulator_len: 1,
                        }),
                    ),
                    Node::Reshape(t) => {
                        OperationIr::BaseFloat(BaseOperationIr::Reshape(ShapeOpIr {
                            input: read(t, i),
                            out,
                        }))
                    }
                    Node::SwapDims(t, dim1, dim2) => {
                        OperationIr::BaseFloat(BaseOperationIr::SwapDims(SwapDimsOpIr {
                            input: read(t, i),
                            out,
                            dim1,
                            dim2,
                        }))
                    }
                    Node::LowerEqualElem(t, s) => OperationIr::NumericFloat(
                        self.dtypes[t.0 as usize],
                        NumericOperationIr::LowerEqualElem(ScalarOpIr {
                            lhs: read(t, i),
                            rhs: scalar(s),
                            out,
                        }),
                    ),
                    Node::LowerElem(t, s) => OperationIr::NumericFloat(
                        self.dtypes[t.0 as usize],
                        NumericOperationIr::LowerElem(ScalarOpIr {
                            lhs: read(t, i),
                            rhs: scalar(s),
                            out,
                        }),
                    ),
                    Node::MaskFill(t, m, s) => {
                        OperationIr::BaseFloat(BaseOperationIr::MaskFill(MaskFillOpIr {
                            tensor: read(t, i),
                            mask: read(m, i),
                            value: scalar(s),
                            out,
                        }))
                    }
                    Node::MaskWhere(t, m, v) => {
                        OperationIr::BaseFloat(BaseOperationIr::MaskWhere(MaskWhereOpIr {
                            tensor: read(t, i),
                            mask: read(m, i),
                            value: read(v, i),
                            out,
                        }))
                    }
                    Node::Zeros => {
                        OperationIr::BaseFloat(BaseOperationIr::Zeros(CreationOpIr { out }))
                    }
                    Node::Full(s) => OperationIr::NumericFloat(
                        dtype,
                        NumericOperationIr::Full(FullOpIr {
                            out,
                            value: scalar(s),
                        }),
                    ),
                    Node::Unary(op, t) => {
                        let desc = UnaryOpIr {
                            input: read(t, i),
                            out,
                        };
                        OperationIr::Float(
                            dtype,
                            match op {
                                Unary::Exp => FloatOperationIr::Exp(desc),
                                Unary::Log => FloatOperationIr::Log(desc),
                                Unary::Erf => FloatOperationIr::Erf(desc),
                                Unary::Tanh => FloatOperationIr::Tanh(desc),
                            },
                        )
                    }
                    Node::Scalar(op, t, s) => {
                        let desc = ScalarOpIr {
                            lhs: read(t, i),
                            rhs: scalar(s),
                            out,
                        };
                        match op {
                            ScalarKind::Mul => OperationIr::NumericFloat(
                                dtype,
                                NumericOperationIr::MulScalar(desc),
                            ),
                            ScalarKind::Div => OperationIr::NumericFloat(
                                dtype,
                                NumericOperationIr::DivScalar(desc),
                            ),
                            ScalarKind::Add => OperationIr::NumericFloat(
                                dtype,
                                NumericOperationIr::AddScalar(desc),
                            ),
                            ScalarKind::Powf => {
                                OperationIr::Float(dtype, FloatOperationIr::PowfScalar(desc))
                            }
                        }
                    }
                    Node::Mul(l, r) => OperationIr::NumericFloat(
                        dtype,
                        NumericOperationIr::Mul(BinaryOpIr {
                            lhs: read(l, i),
                            rhs: read(r, i),
                            out,
                        }),
                    ),
                    Node::Cast(t) => OperationIr::BaseFloat(BaseOperationIr::Cast(CastOpIr {
                        input: read(t, i),
                        out,
                    })),
                    Node::Clamp(t, min, max) => OperationIr::NumericFloat(
                        dtype,
                        NumericOperationIr::Clamp(ClampOpIr {
                            tensor: read(t, i),
                            min: scalar(min),
                            max: scalar(max),
                            out,
                        }),
                    ),
                }
            })
            .collect()
    }

    /// The window a fuser fed these ops would hold; `outputs` are read after the window.
    pub fn window(&self, outputs: &[T]) -> Window {
        let mut window = Window::new();
        for op in self.ops(outputs) {
            window.push(&op);
        }
        window
    }
}

fn node_inputs(node: &Node) -> Vec<T> {
    match *node {
        Node::Matmul(a, b) | Node::Add(a, b) | Node::Lower(a, b) | Node::Mul(a, b) => vec![a, b],
        Node::MaskFill(a, b, _) => vec![a, b],
        Node::MaskWhere(a, b, c) => vec![a, b, c],
        Node::Reshape(a)
        | Node::SwapDims(a, _, _)
        | Node::LowerEqualElem(a, _)
        | Node::LowerElem(a, _)
        | Node::Unary(_, a)
        | Node::Scalar(_, a, _)
        | Node::Cast(a)
        | Node::Clamp(a, _, _)
        | Node::SumDim(a, _) => vec![a],
        Node::Zeros | Node::Full(_) => vec![],
    }
}

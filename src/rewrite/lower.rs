//! Lowering: a [`Window`] to an e-graph of [`TensorLang`] nodes.

use super::{DimsLeaf, Elem, ElemLeaf, ScalarLeaf, ShapeLeaf, TensorGraph, TensorLang, TensorLeaf};
use crate::capture::{OpKind, Window};
use burn_ir::{TensorId, TensorIr};
use egg::Id;
use std::collections::HashMap;

/// A window as an e-graph, with the class of each tensor it mentions.
pub struct Lowered {
    /// One node per understood op; tensors from elsewhere (or from opaque ops) are leaves.
    pub egraph: TensorGraph,
    /// The e-class computing each tensor (canonicalise with `egraph.find` after rewriting).
    pub class_of: HashMap<TensorId, Id>,
    /// Outputs of ops that can end a fused pattern ([`OpKind::may_end_pattern`]), in window
    /// order.
    pub roots: Vec<TensorId>,
}

impl Lowered {
    /// Tensors of the window whose e-class in `egraph` (this one, rewritten) is `class`,
    /// sorted by id.
    pub fn find_tensors(&self, egraph: &TensorGraph, class: Id) -> Vec<TensorId> {
        let class = egraph.find(class);
        let mut tensors: Vec<TensorId> = self
            .class_of
            .iter()
            .filter(|&(_, &id)| egraph.find(id) == class)
            .map(|(tensor, _)| *tensor)
            .collect();
        tensors.sort_by_key(|t| t.value());
        tensors
    }
}

/// Lowers every op Hypatia understands; an op it does not understand adds nothing, and the
/// tensors it produces become leaves where they are read.
///
/// ```
/// use hypatia::{capture::Window, rewrite::lower};
/// let lowered = lower(&Window::new());
/// assert!(lowered.roots.is_empty());
/// ```
pub fn lower(window: &Window) -> Lowered {
    let mut egraph = TensorGraph::default();
    let mut class_of: HashMap<TensorId, Id> = HashMap::new();
    let mut roots = Vec::new();

    for op in window.ops() {
        let scalar = |i: usize| {
            op.scalars
                .get(i)
                .map(|&s| TensorLang::Scalar(ScalarLeaf(s)))
        };
        if !op.kind.is_lowered() || op.scalars.len() < op.kind.scalar_count() {
            continue;
        }
        let mut input = |i: usize| class_or_leaf(&mut egraph, &mut class_of, &op.inputs[i]);
        let node = match op.kind {
            OpKind::Matmul => TensorLang::Matmul([input(0), input(1)]),
            OpKind::Add => TensorLang::Add([input(0), input(1)]),
            OpKind::Lower => TensorLang::Lower([input(0), input(1)]),
            OpKind::MaskWhere => TensorLang::MaskWhere([input(0), input(1), input(2)]),
            OpKind::Reshape => {
                let x = input(0);
                TensorLang::Reshape([x, egraph.add(TensorLang::Shape(shape_leaf(op.out())))])
            }
            OpKind::SwapDims { dim1, dim2 } => {
                let x = input(0);
                TensorLang::SwapDims([x, egraph.add(TensorLang::Dims(DimsLeaf(dim1, dim2)))])
            }
            OpKind::LowerEqualElem => {
                let x = input(0);
                TensorLang::LowerEqualElem([x, egraph.add(scalar(0).expect("checked above"))])
            }
            OpKind::LowerElem => {
                let x = input(0);
                TensorLang::LowerElem([x, egraph.add(scalar(0).expect("checked above"))])
            }
            OpKind::MaskFill => {
                let (x, mask) = (input(0), input(1));
                TensorLang::MaskFill([x, mask, egraph.add(scalar(0).expect("checked above"))])
            }
            OpKind::Zeros => TensorLang::Zeros(egraph.add(TensorLang::Shape(shape_leaf(op.out())))),
            OpKind::Full => {
                let shape = egraph.add(TensorLang::Shape(shape_leaf(op.out())));
                TensorLang::Full([shape, egraph.add(scalar(0).expect("checked above"))])
            }
            OpKind::Mul => TensorLang::Mul([input(0), input(1)]),
            OpKind::MulScalar | OpKind::DivScalar | OpKind::AddScalar | OpKind::PowfScalar => {
                let x = input(0);
                let s = egraph.add(scalar(0).expect("checked above"));
                match op.kind {
                    OpKind::MulScalar => TensorLang::MulScalar([x, s]),
                    OpKind::DivScalar => TensorLang::DivScalar([x, s]),
                    OpKind::AddScalar => TensorLang::AddScalar([x, s]),
                    _ => TensorLang::PowfScalar([x, s]),
                }
            }
            OpKind::Erf => TensorLang::Erf(input(0)),
            OpKind::Tanh => TensorLang::Tanh(input(0)),
            OpKind::Exp => TensorLang::Exp(input(0)),
            OpKind::Log => TensorLang::Log(input(0)),
            OpKind::Cast => {
                let x = input(0);
                let elem = Elem::from_dtype(op.out().dtype);
                TensorLang::Cast([x, egraph.add(TensorLang::ElemOf(ElemLeaf(elem)))])
            }
            OpKind::Clamp => {
                let x = input(0);
                let min = egraph.add(scalar(0).expect("checked above"));
                let max = egraph.add(scalar(1).expect("checked above"));
                TensorLang::Clamp([x, min, max])
            }
            OpKind::Opaque | OpKind::Bookkeeping | OpKind::Source | OpKind::SumDim { .. } => {
                unreachable!("skipped above")
            }
        };
        let id = egraph.add(node);
        class_of.insert(op.out().id, id);
        if op.kind.may_end_pattern() {
            roots.push(op.out().id);
        }
    }
    egraph.rebuild();
    Lowered {
        egraph,
        class_of,
        roots,
    }
}

fn class_or_leaf(
    egraph: &mut TensorGraph,
    class_of: &mut HashMap<TensorId, Id>,
    tensor: &TensorIr,
) -> Id {
    *class_of.entry(tensor.id).or_insert_with(|| {
        egraph.add(TensorLang::Tensor(TensorLeaf {
            id: tensor.id.value(),
            elem: Elem::from_dtype(tensor.dtype),
            shape: tensor.shape.iter().copied().collect(),
        }))
    })
}

fn shape_leaf(tensor: &TensorIr) -> ShapeLeaf {
    ShapeLeaf(tensor.shape.iter().copied().collect())
}

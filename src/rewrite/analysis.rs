//! [`TensorAnalysis`]: shape and element type of every e-class.

use super::{Dims, Elem, TensorLang};
use egg::{Analysis, DidMerge, EGraph, Id};

/// What is known about the tensor an e-class computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Element type.
    pub elem: Elem,
    /// Relative shape (`0` is size 1).
    pub shape: Dims,
}

/// Computes [`TensorInfo`] bottom-up; leaves that are not tensors (shapes, scalars, dims) have none.
#[derive(Clone, Debug, Default)]
pub struct TensorAnalysis;

/// The e-graph type of this crate.
pub type TensorGraph = EGraph<TensorLang, TensorAnalysis>;

impl Analysis<TensorLang> for TensorAnalysis {
    type Data = Option<TensorInfo>;

    fn make(egraph: &mut TensorGraph, node: &TensorLang, _id: Id) -> Self::Data {
        let info = |id: &Id| egraph[*id].data.clone();
        let with = |id: &Id, shape: Dims| {
            info(id).map(|i| TensorInfo {
                elem: i.elem,
                shape,
            })
        };
        match node {
            TensorLang::Tensor(leaf) => Some(TensorInfo {
                elem: leaf.elem,
                shape: leaf.shape.clone(),
            }),
            TensorLang::Shape(_)
            | TensorLang::Scalar(_)
            | TensorLang::Dims(_)
            | TensorLang::ElemOf(_)
            | TensorLang::NoBias(_) => None,
            TensorLang::Matmul([lhs, rhs]) | TensorLang::Linear([lhs, rhs, _]) => {
                let shape = matmul_shape(&info(lhs)?.shape, &info(rhs)?.shape)?;
                with(lhs, shape)
            }
            TensorLang::Add([lhs, rhs]) | TensorLang::Mul([lhs, rhs]) => {
                with(lhs, broadcast(&info(lhs)?.shape, &info(rhs)?.shape)?)
            }
            TensorLang::MulScalar([x, _])
            | TensorLang::DivScalar([x, _])
            | TensorLang::AddScalar([x, _])
            | TensorLang::PowfScalar([x, _])
            | TensorLang::Erf(x)
            | TensorLang::Tanh(x)
            | TensorLang::Exp(x)
            | TensorLang::Log(x)
            | TensorLang::Clamp([x, _, _])
            | TensorLang::Gelu([x, ..])
            | TensorLang::GeluTanh([x, ..])
            | TensorLang::Silu([x, ..])
            | TensorLang::LeakyRelu([x, ..])
            | TensorLang::GeluGrad([x, ..])
            | TensorLang::Sigmoid([x, ..]) => info(x),
            TensorLang::Cast([x, elem]) => {
                let elem = egraph[*elem].nodes.iter().find_map(|node| match node {
                    TensorLang::ElemOf(leaf) => Some(leaf.0),
                    _ => None,
                })?;
                Some(TensorInfo {
                    elem,
                    shape: info(x)?.shape,
                })
            }
            TensorLang::LowerEqualElem([lhs, _]) | TensorLang::LowerElem([lhs, _]) => {
                Some(TensorInfo {
                    elem: Elem::Bool,
                    shape: info(lhs)?.shape,
                })
            }
            TensorLang::Lower([lhs, rhs]) => Some(TensorInfo {
                elem: Elem::Bool,
                shape: broadcast(&info(lhs)?.shape, &info(rhs)?.shape)?,
            }),
            TensorLang::MaskFill([tensor, mask, _]) => {
                with(tensor, broadcast(&info(tensor)?.shape, &info(mask)?.shape)?)
            }
            TensorLang::MaskWhere([tensor, mask, value]) => {
                let shape = broadcast(&info(tensor)?.shape, &info(mask)?.shape)?;
                with(tensor, broadcast(&shape, &info(value)?.shape)?)
            }
            TensorLang::Reshape([input, shape]) => with(input, find_shape(egraph, *shape)?),
            TensorLang::SwapDims([input, dims]) => {
                let (a, b) = find_swap(egraph, *dims)?;
                let mut shape = info(input)?.shape;
                (a < shape.len() && b < shape.len()).then(|| shape.swap(a, b))?;
                with(input, shape)
            }
            TensorLang::Zeros(shape) | TensorLang::Full([shape, _]) => Some(TensorInfo {
                elem: Elem::Other,
                shape: find_shape(egraph, *shape)?,
            }),
            TensorLang::Relu(input) => info(input),
            // The fused nodes: a matmul's shape.
            fused => {
                let (_, children) = fused.fused()?;
                let (lhs, rhs) = (&children[0], &children[1]);
                let shape = matmul_shape(&info(lhs)?.shape, &info(rhs)?.shape)?;
                with(lhs, shape)
            }
        }
    }

    fn merge(&mut self, a: &mut Self::Data, b: Self::Data) -> DidMerge {
        egg::merge_option(a, b, |a, b| {
            assert_eq!(
                a.shape, b.shape,
                "a rewrite rule merged tensors of different shapes; the rule's condition is wrong"
            );
            DidMerge(false, false)
        })
    }
}

/// The target dims of the `Shape` leaf in class `id`.
pub fn find_shape(egraph: &TensorGraph, id: Id) -> Option<Dims> {
    egraph[id].nodes.iter().find_map(|node| match node {
        TensorLang::Shape(leaf) => Some(leaf.0.clone()),
        _ => None,
    })
}

fn find_swap(egraph: &TensorGraph, id: Id) -> Option<(usize, usize)> {
    egraph[id].nodes.iter().find_map(|node| match node {
        TensorLang::Dims(leaf) => Some((leaf.0, leaf.1)),
        _ => None,
    })
}

/// Numpy-style broadcast of two relative shapes; `0` (size 1) stretches to the other dim.
pub fn broadcast(lhs: &[usize], rhs: &[usize]) -> Option<Dims> {
    let rank = lhs.len().max(rhs.len());
    let at = |shape: &[usize], i: usize| {
        let pad = rank - shape.len();
        if i < pad { 0 } else { shape[i - pad] }
    };
    (0..rank)
        .map(|i| match (at(lhs, i), at(rhs, i)) {
            (a, b) if a == b => Some(a),
            (0, b) => Some(b),
            (a, 0) => Some(a),
            _ => None,
        })
        .collect()
}

/// Shape of a batched matmul: broadcast batch dims, then `[m, n]`; `None` if `k` differs.
pub fn matmul_shape(lhs: &[usize], rhs: &[usize]) -> Option<Dims> {
    if lhs.len() < 2 || rhs.len() < 2 || lhs[lhs.len() - 1] != rhs[rhs.len() - 2] {
        return None;
    }
    let mut shape = broadcast(&lhs[..lhs.len() - 2], &rhs[..rhs.len() - 2])?;
    shape.extend([lhs[lhs.len() - 2], rhs[rhs.len() - 1]]);
    Some(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_stretches_size_one_dims() {
        assert_eq!(broadcast(&[1, 2], &[0, 2]), Some(vec![1, 2]));
        assert_eq!(broadcast(&[3, 1, 2], &[2]), Some(vec![3, 1, 2]));
        assert_eq!(broadcast(&[1, 2], &[1, 3]), None);
    }

    #[test]
    fn matmul_shape_needs_matching_inner_dim() {
        assert_eq!(matmul_shape(&[1, 2], &[2, 3]), Some(vec![1, 3]));
        assert_eq!(matmul_shape(&[4, 1, 2], &[0, 2, 3]), Some(vec![4, 1, 3]));
        assert_eq!(matmul_shape(&[1, 2], &[3, 2]), None);
    }
}

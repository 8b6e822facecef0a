//! The fuser: finds `relu(x · w + b)` in Burn 0.22's op stream, in the forms `nn::Linear`
//! (`burn-backend`'s `linear`: the weight or bias unsqueezed, the batch dims merged into the
//! rows and split again) and `relu(x.matmul(w) + b.unsqueeze())` emit, and finishes into a
//! [`LinearRelu`](crate::operation::LinearRelu).
//!
//! The accepted stream, in order: reshapes of the matmul's operands, the matmul, the bias's
//! reshape, the add, a reshape of the sum, the relu (`sum <= 0`, `mask_fill`). Every intermediate must die in the
//! segment (its last use `ReadWrite`): this proof writes out the activation only, where the
//! 0.21 crate also writes a kept pre-activation.

use crate::operation::{LinearRelu, LinearStep};
use burn_cubecl::fusion::CubeFuser;
use burn_cubecl_fusion::optim::CubeOptimization;
use burn_fusion::{FuserProperties, FuserStatus, OperationFuser};
use burn_ir::{
    BaseOperationIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr, TensorId,
    TensorIr, TensorStatus,
};

/// Score bonus over Burn's fusers, whose scores count fused ops: as in the 0.21 crate's
/// `runtime::fuser`, a matched Linear wins the segment it covers.
const SCORE_BONUS: u64 = 1 << 16;

/// Where the match stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Reshapes of the matmul's operands, or the matmul.
    Operands,
    /// The bias's reshape, the add, or (no bias) the relu.
    Product,
    /// A reshape of the sum, or the relu's comparison.
    Sum,
    /// The relu's `mask_fill`.
    Mask,
    /// Matched: nothing more is taken.
    Done,
    /// Not a Linear + ReLU: the segment is Burn's.
    Failed,
}

/// Burn's fuser role for one execution stream: fed each op, closes on the first that does not
/// fit.
#[derive(Clone)]
pub struct LinearReluFuser {
    stage: Stage,
    len: usize,
    /// Reshape outputs seen before the matmul: view id → the tensor it views.
    views: Vec<(TensorId, TensorIr)>,
    /// The bias's reshape, once seen: its output id and its rank-1 input.
    bias_view: Option<(TensorId, TensorIr)>,
    step: Option<LinearStep>,
    /// The id the relu must read: the product, the sum or the sum's reshape.
    head: Option<TensorId>,
    /// The relu's mask (`head <= 0`).
    mask: Option<TensorId>,
}

/// The placeholder id a relative scalar carries (burn-fusion's `ScalarIr::UInt(id)`).
fn scalar_id(scalar: &ScalarIr) -> u64 {
    match scalar {
        ScalarIr::UInt(id) => *id,
        // Not relative: never equal to a context's scalar, so the segment runs Burn's ops.
        _ => u64::MAX,
    }
}

impl LinearReluFuser {
    /// An empty fuser.
    pub fn new() -> Self {
        Self {
            stage: Stage::Operands,
            len: 0,
            views: Vec::new(),
            bias_view: None,
            step: None,
            head: None,
            mask: None,
        }
    }

    /// This fuser as Burn's registry wants it.
    pub fn boxed() -> CubeFuser {
        CubeFuser::new(Self::new())
    }

    /// The tensor `operand` reads: a view's source when it is a reshape taken here.
    fn source(&self, operand: &TensorIr) -> (TensorIr, Option<TensorIr>) {
        match self.views.iter().find(|(id, _)| *id == operand.id) {
            Some((_, source)) => (source.clone(), Some(operand.clone())),
            None => (operand.clone(), None),
        }
    }

    fn next(&mut self, operation: &OperationIr) -> Stage {
        let dies = |t: &TensorIr| t.status == TensorStatus::ReadWrite;
        match (self.stage, operation) {
            (Stage::Operands, OperationIr::BaseFloat(BaseOperationIr::Reshape(r))) => {
                self.views.push((r.out.id, r.input.clone()));
                Stage::Operands
            }
            (Stage::Operands, OperationIr::Float(_, FloatOperationIr::Matmul(m))) => {
                // A view taken here must die in the matmul: nothing else may read it.
                let views_die = [&m.lhs, &m.rhs]
                    .iter()
                    .all(|t| !self.views.iter().any(|(id, _)| *id == t.id) || dies(t));
                // And every view taken is an operand: the kernel writes no other.
                let views_read =
                    (self.views.iter()).all(|(id, _)| *id == m.lhs.id || *id == m.rhs.id);
                if m.out.shape.rank() < 2 || !views_die || !views_read {
                    return Stage::Failed;
                }
                let (x, x_view) = self.source(&m.lhs);
                let (w, w_view) = self.source(&m.rhs);
                self.step = Some(LinearStep {
                    x,
                    x_view,
                    w,
                    w_view,
                    bias: None,
                    product: m.out.clone(),
                    out: m.out.clone(),
                    zeros: Vec::new(),
                });
                self.head = Some(m.out.id);
                Stage::Product
            }
            (Stage::Product, OperationIr::BaseFloat(BaseOperationIr::Reshape(r)))
                if r.input.shape.rank() == 1 && self.bias_view.is_none() =>
            {
                self.bias_view = Some((r.out.id, r.input.clone()));
                Stage::Product
            }
            (Stage::Product, OperationIr::NumericFloat(_, NumericOperationIr::Add(add))) => {
                let head = self.head.expect("set with the matmul");
                let Some((view, bias)) = self.bias_view.clone() else {
                    return Stage::Failed;
                };
                let (product, other) = if add.lhs.id == head {
                    (&add.lhs, &add.rhs)
                } else {
                    (&add.rhs, &add.lhs)
                };
                if product.id != head || other.id != view || !dies(product) || !dies(other) {
                    return Stage::Failed;
                }
                let step = self.step.as_mut().expect("set with the matmul");
                step.bias = Some(bias);
                step.out = add.out.clone();
                self.head = Some(add.out.id);
                Stage::Sum
            }
            (Stage::Sum, OperationIr::BaseFloat(BaseOperationIr::Reshape(r)))
                if Some(r.input.id) == self.head && dies(&r.input) =>
            {
                self.step.as_mut().expect("set with the matmul").out = r.out.clone();
                self.head = Some(r.out.id);
                Stage::Sum
            }
            // Burn's relu on burn-fusion (burn-backend's default `relu`; 0.22's activation IR
            // is the router's): `mask_fill(sum, sum <= 0, 0)`.
            (
                Stage::Product | Stage::Sum,
                OperationIr::NumericFloat(_, NumericOperationIr::LowerEqualElem(le)),
            ) if Some(le.lhs.id) == self.head
                && (self.stage == Stage::Sum || self.bias_view.is_none()) =>
            {
                self.mask = Some(le.out.id);
                self.step
                    .as_mut()
                    .expect("set with the matmul")
                    .zeros
                    .push(scalar_id(&le.rhs));
                Stage::Mask
            }
            (Stage::Mask, OperationIr::BaseFloat(BaseOperationIr::MaskFill(fill)))
                if Some(fill.tensor.id) == self.head
                    && Some(fill.mask.id) == self.mask
                    && dies(&fill.tensor)
                    && dies(&fill.mask) =>
            {
                let step = self.step.as_mut().expect("set with the matmul");
                step.zeros.push(scalar_id(&fill.value));
                step.out = fill.out.clone();
                Stage::Done
            }
            _ => Stage::Failed,
        }
    }
}

impl Default for LinearReluFuser {
    fn default() -> Self {
        Self::new()
    }
}

impl OperationFuser<CubeOptimization> for LinearReluFuser {
    fn fuse(&mut self, operation: &OperationIr) {
        if matches!(self.stage, Stage::Done | Stage::Failed) {
            return;
        }
        self.stage = self.next(operation);
        if self.stage != Stage::Failed {
            self.len += 1;
        }
    }

    fn finish(&mut self) -> CubeOptimization {
        let step = self.step.clone().expect("finish follows a match");
        CubeOptimization::new(LinearRelu::new(step, self.len))
    }

    fn reset(&mut self) {
        *self = Self::new();
    }

    fn status(&self) -> FuserStatus {
        match self.stage {
            Stage::Done | Stage::Failed => FuserStatus::Closed,
            _ => FuserStatus::Open,
        }
    }

    fn properties(&self) -> FuserProperties {
        let ready = self.stage == Stage::Done;
        FuserProperties {
            score: if ready {
                SCORE_BONUS + self.len as u64
            } else {
                0
            },
            ready,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn clone_dyn(&self) -> Box<dyn OperationFuser<CubeOptimization>> {
        Box::new(self.clone())
    }
}

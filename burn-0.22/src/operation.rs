//! The fused operation: what a matched segment runs, Hypatia's kernel or, where the real
//! shapes and layouts do not fit it, Burn's own ops one by one (`fallback`).

use crate::kernel::{Epilogue, Operand, contiguous_strides, launch_linear};
use burn_cubecl_fusion::optim::FusedOperation;
use burn_cubecl_fusion::{CubeFusionHandle, FallbackOperation};
use burn_fusion::stream::{Context, ScalarId};
use burn_ir::{ScalarIr, TensorIr, TensorStatus};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Whether matched segments run Hypatia's kernel (else Burn's ops, as if unmatched).
static CLAIMING: AtomicBool = AtomicBool::new(true);
/// How many segments ran Hypatia's kernel, and how many ran Burn's ops.
static LAUNCHED: AtomicUsize = AtomicUsize::new(0);
static FELL_BACK: AtomicUsize = AtomicUsize::new(0);

/// Lets matched segments run Hypatia's kernel (`true`, the default) or Burn's own ops.
pub fn set_claiming(on: bool) {
    CLAIMING.store(on, Ordering::SeqCst);
}

/// Segments run by Hypatia's kernel and by Burn's ops since the process started.
pub fn counts() -> (usize, usize) {
    (
        LAUNCHED.load(Ordering::SeqCst),
        FELL_BACK.load(Ordering::SeqCst),
    )
}

/// The tensors of one matched Linear, as the segment's (relative) IR names them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LinearStep {
    /// The input, and the reshape of it the matmul read, if any.
    pub x: TensorIr,
    /// See `x`.
    pub x_view: Option<TensorIr>,
    /// The weight, and the reshape of it the matmul read, if any.
    pub w: TensorIr,
    /// See `w`.
    pub w_view: Option<TensorIr>,
    /// The rank-1 bias, if any.
    pub bias: Option<TensorIr>,
    /// The matmul's output (the kernel's shape: rows and columns).
    pub product: TensorIr,
    /// The segment's output: the relu.
    pub out: TensorIr,
    /// The relu's scalars (the comparison's and the fill's), zero for a relu.
    pub zeros: Vec<u64>,
}

/// A matched `relu(x · w + b)` segment; serialised as it is (Burn restores optimizations from
/// their state).
#[derive(Clone, Serialize, Deserialize)]
pub struct LinearRelu {
    step: LinearStep,
    len: usize,
}

impl LinearRelu {
    /// The operation of `step`, a segment of `len` ops.
    pub fn new(step: LinearStep, len: usize) -> Self {
        Self { step, len }
    }

    /// The kernel's operands in this execution, or `None` where the real shapes or layouts do
    /// not fit it (a reshape that is not a view of its source's buffer, a bias that is not a
    /// row of the output).
    fn operands(
        &self,
        context: &mut Context<CubeFusionHandle>,
    ) -> Option<(Operand, Operand, Option<Operand>)> {
        let zero = |id: &u64| match context.scalars.get(&ScalarId { value: *id }) {
            Some(ScalarIr::Float(v)) => *v == 0.0,
            Some(ScalarIr::Int(v)) => *v == 0,
            Some(ScalarIr::UInt(v)) => *v == 0,
            _ => false,
        };
        if !self.step.zeros.iter().all(zero) {
            return None;
        }
        let real = |t: &TensorIr| context.tensors.get(&t.id).cloned();
        let product = real(&self.step.product)?;
        let (x, x_view) = (real(&self.step.x)?, self.step.x_view.as_ref().map(real));
        let (w, w_view) = (real(&self.step.w)?, self.step.w_view.as_ref().map(real));
        let bias = self.step.bias.as_ref().map(real);
        let n = product.shape[product.shape.rank() - 1];
        // A view the segment names must be in it: `None` inside means it is not.
        if x_view == Some(None) || w_view == Some(None) || bias == Some(None) {
            return None;
        }
        let x = view(context, &x, x_view.flatten())?;
        let w = view(context, &w, w_view.flatten())?;
        let bias = match bias.flatten() {
            Some(b) if b.shape[0] != n => return None,
            Some(b) => Some(operand(context, &b, b.shape.to_vec())),
            None => None,
        };
        Some((x, w, bias))
    }
}

/// `tensor`'s handle as a kernel operand of `shape`, left in the context.
fn operand(
    context: &mut Context<CubeFusionHandle>,
    tensor: &TensorIr,
    shape: Vec<usize>,
) -> Operand {
    Operand {
        handle: context
            .handles
            .get_handle(&tensor.id, &TensorStatus::ReadOnly),
        shape,
    }
}

/// `source` as the matmul read it: through `view`'s shape when it reshaped it, which must
/// then be a view of the same buffer (contiguous rows, or only leading size-1 dims added).
fn view(
    context: &mut Context<CubeFusionHandle>,
    source: &TensorIr,
    view: Option<TensorIr>,
) -> Option<Operand> {
    let mut operand = operand(context, source, source.shape.to_vec());
    let Some(view) = view else {
        return Some(operand);
    };
    let to: Vec<usize> = view.shape.to_vec();
    let from = &operand.shape;
    let strides: Vec<usize> = operand.handle.strides.iter().copied().collect();
    let contiguous: Vec<usize> = contiguous_strides(from).iter().copied().collect();
    let new_strides: Vec<usize> = if strides == contiguous {
        contiguous_strides(&to).iter().copied().collect()
    } else if to.len() >= from.len() && to[to.len() - from.len()..] == from[..] {
        // Leading size-1 dims added (a weight or bias unsqueezed): the source's strides.
        let mut s = vec![0; to.len() - from.len()];
        s.extend(&strides);
        s
    } else {
        return None;
    };
    operand.handle.strides = burn_std::Strides::new(&new_strides);
    operand.shape = to;
    Some(operand)
}

impl FusedOperation for LinearRelu {
    const NAME: &'static str = "hypatia-linear-relu";
    type State = Self;

    fn num_ops_fused(&self) -> usize {
        self.len
    }

    fn run(
        &mut self,
        context: &mut Context<CubeFusionHandle>,
        fallback: &dyn Fn(usize) -> Box<dyn FallbackOperation>,
    ) {
        let fits = CLAIMING
            .load(Ordering::SeqCst)
            .then(|| self.operands(context))
            .flatten();
        let Some((x, w, bias)) = fits else {
            FELL_BACK.fetch_add(1, Ordering::SeqCst);
            for i in 0..self.len {
                fallback(i).run(context);
            }
            return;
        };
        let real = |t: &TensorIr| context.tensors.get(&t.id).cloned().expect("in the segment");
        let product = real(&self.step.product);
        let out = real(&self.step.out);
        let mut handle = launch_linear(
            &x,
            &w,
            bias.as_ref(),
            &product.shape.to_vec(),
            Epilogue::Relu,
        );
        // Contiguous: the output's own shape (the sum's reshape, if any) views the same rows.
        handle.strides = contiguous_strides(&out.shape.to_vec());
        context.handles.register_handle(out.id, handle);
        // Inputs whose last reader was this segment are released, once each (x may be w).
        let mut released = Vec::new();
        let step = &self.step;
        for t in [Some(&step.x), Some(&step.w), step.bias.as_ref()]
            .into_iter()
            .flatten()
        {
            if t.status == TensorStatus::ReadWrite && !released.contains(&t.id) {
                let id = real(t).id;
                context.handles.get_handle(&id, &TensorStatus::ReadWrite);
                released.push(t.id);
            }
        }
        LAUNCHED.fetch_add(1, Ordering::SeqCst);
    }

    fn to_state(&self) -> Self::State {
        self.clone()
    }

    fn from_state(_device: &cubecl::Device, state: Self::State) -> Self {
        state
    }
}

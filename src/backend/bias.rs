//! A Linear's bias reshaped once: `Hypatia<B>::linear` reuses the row view it made of the same
//! bias before, so a replayed forward records one op less per layer.
//!
//! Burn's `linear` reshapes its bias `[n]` to `[1, .., 1, n]` (the input's rank) on every call:
//! an op for the caller to record and for burn-fusion's thread to register, in a small forward
//! as costly as the matmul's own recording. A model's parameters in inference are the same
//! tensors from one forward to the next, and Burn's tensors are values: the reshape made for a
//! bias before is that bias, reshaped. So the add reads it again (the rewrite rules fuse a row
//! bias with or without its reshape).
//!
//! What is kept, per thread (each thread records on its own stream):
//! - a bias is kept once it was reshaped twice; training makes new parameters every step, so its
//!   biases never are, and their in-place updates stay possible;
//! - at most [`KEPT`] views, the oldest dropped first. A kept view holds its bias's buffer
//!   (a vector) until then.
//!
//! [`HostStats::bias_views`](crate::HostStats::bias_views) counts the reuses.

use crate::backend::{Fused, HypatiaFusion};
use crate::runtime::HypatiaRuntime;
use crate::stats;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Shape};
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_fusion::FusionTensor;
use burn_ir::TensorId;
use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most views one thread keeps.
pub const KEPT: usize = 32;

/// Most biases one thread remembers having reshaped once.
const SEEN: usize = 64;

/// One kept view: of which bias, at which rank.
struct Kept {
    bias: TensorId,
    rank: usize,
    /// The `FusionTensor` of the view, for its runtime's type.
    view: Box<dyn Any>,
    /// The device's reuse count.
    reuses: &'static AtomicU64,
}

#[derive(Default)]
struct Views {
    kept: VecDeque<Kept>,
    seen: VecDeque<TensorId>,
}

thread_local! {
    static VIEWS: RefCell<Views> = RefCell::default();
}

/// The ops [`HypatiaFusion`] runs itself instead of forwarding them to burn-fusion's `Fusion`
/// (its generated `own!` methods call these).
pub(crate) trait OwnOps: Backend {
    /// `ModuleOps::linear`, with the bias's row view kept.
    fn linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self>;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> OwnOps
    for HypatiaFusion<R, F, I, BT>
{
    /// Burn's default `linear`, op for op and in its order (weight view, matmul, bias view,
    /// add), but for where the bias's view comes from.
    fn linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        let rank = x.shape.num_dims();
        let weight = leading_ones::<R, F, I, BT>(weight, rank);
        let out = Fused::<R, F, I, BT>::float_matmul(x, weight);
        match bias {
            Some(bias) => {
                let bias = row_view::<R, F, I, BT>(bias, rank);
                Fused::<R, F, I, BT>::float_add(out, bias)
            }
            None => out,
        }
    }
}

/// `tensor` with leading dims of 1 up to `rank`, as Burn's `linear` reshapes its weight.
fn leading_ones<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    tensor: FusionTensor<HypatiaRuntime<R>>,
    rank: usize,
) -> FusionTensor<HypatiaRuntime<R>> {
    let dims = tensor.shape.num_dims();
    if dims >= rank {
        return tensor;
    }
    let mut shape = vec![1; rank - dims];
    shape.extend(tensor.shape.iter());
    Fused::<R, F, I, BT>::float_reshape(tensor, Shape::from(shape))
}

/// `bias` as a row of the output's `rank`: the view kept for it, or a new reshape.
fn row_view<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    bias: FusionTensor<HypatiaRuntime<R>>,
    rank: usize,
) -> FusionTensor<HypatiaRuntime<R>> {
    let dims = bias.shape.num_dims();
    if dims >= rank {
        return bias;
    }
    let id = bias.id;
    let kept = VIEWS.with_borrow(|views| {
        let kept = (views.kept.iter()).find(|k| k.bias == id && k.rank == rank)?;
        let view = kept
            .view
            .downcast_ref::<FusionTensor<HypatiaRuntime<R>>>()?;
        kept.reuses.fetch_add(1, Ordering::Relaxed);
        Some(view.clone())
    });
    // The caller's reference to `bias` is dropped here, as the reshape would have consumed it.
    if let Some(view) = kept {
        return view;
    }
    let view = leading_ones::<R, F, I, BT>(bias, rank);
    let evicted = VIEWS.with_borrow_mut(|views| {
        let Some(at) = views.seen.iter().position(|seen| *seen == id) else {
            if views.seen.len() == SEEN {
                views.seen.pop_front();
            }
            views.seen.push_back(id);
            return None;
        };
        views.seen.remove(at);
        views.kept.push_back(Kept {
            bias: id,
            rank,
            view: Box::new(view.clone()),
            reuses: stats::hot(&stats::device_key(view.client.device())).bias_views(),
        });
        (views.kept.len() > KEPT).then(|| views.kept.pop_front())
    });
    // Dropped outside the borrow: dropping a view queues its drop for burn-fusion's thread.
    drop(evicted);
    view
}

//! [`HypatiaRuntime`] and the optimization enum it runs.

use super::{BurnFuser, HypatiaFuser};
use crate::config::config;
use crate::execute::LinearOptimization;
use crate::execute::execute_burn;
use crate::execute::race::{Alternative, AlternativeState};
use crate::plan::Plan;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_cubecl_fusion::optim::{
    CubeOptimization, CubeOptimizationState,
    elemwise::{ElementWiseFuser, ElemwiseOptimization, ElemwiseOptimizationState},
    matmul::{MatmulFuser, MatmulOptimization},
    reduce::{ReduceFuser, ReduceOptimization, ReduceSettings},
    reduce_broadcasted::{ReduceBroadcastedFuser, ReduceBroadcastedOptimization},
};
use burn_fusion::stream::{Context, OrderedExecution};
use burn_fusion::{FusionRuntime, NumOperations, OperationFuser, Optimization};
use core::marker::PhantomData;
use serde::{Deserialize, Serialize};

/// Hypatia's fusion runtime over a CubeCL runtime `R`.
pub struct HypatiaRuntime<R> {
    _runtime: PhantomData<R>,
}

impl<R> core::fmt::Debug for HypatiaRuntime<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("HypatiaRuntime")
    }
}

/// What a claimed block runs: one of Burn's optimizations, or a Hypatia plan.
#[allow(clippy::large_enum_variant)]
pub enum HypatiaOptimization<R: CubeRuntime> {
    /// Burn's elementwise, matmul or reduce fusion.
    Burn(CubeOptimization<R>),
    /// Fused Linear kernels.
    Linear(LinearOptimization<R>),
}

/// Serialisable form of [`HypatiaOptimization`].
#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize, Debug)]
pub enum HypatiaOptimizationState {
    /// Burn's state.
    Burn(CubeOptimizationState),
    /// Hypatia's plan, Burn's alternatives of its steps (see [`crate::execute::race`]) and
    /// Burn's fusions of their recomputed ops (see [`crate::execute::recompute_fused`]).
    Linear(
        Plan,
        Vec<Option<AlternativeState>>,
        Vec<Option<ElemwiseOptimizationState>>,
    ),
}

impl<R: CubeRuntime> core::fmt::Debug for HypatiaOptimization<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Burn(op) => op.fmt(f),
            Self::Linear(op) => op.plan().fmt(f),
        }
    }
}

impl<R: CubeRuntime> NumOperations for HypatiaOptimization<R> {
    fn len(&self) -> usize {
        match self {
            Self::Burn(op) => op.len(),
            Self::Linear(op) => op.plan().len,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Burn(op) => op.name(),
            Self::Linear(_) => "HypatiaLinear",
        }
    }
}

impl<R: CubeRuntime> Optimization<HypatiaRuntime<R>> for HypatiaOptimization<R> {
    fn execute(
        &mut self,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<HypatiaRuntime<R>>,
    ) {
        match self {
            Self::Burn(op) => execute_burn(op, context, execution),
            // The configuration is read here, once an execution, and passed down: nothing
            // below reads the process's configuration itself.
            Self::Linear(op) => op.execute(context, execution, &config()),
        }
    }

    fn to_state(&self) -> HypatiaOptimizationState {
        match self {
            Self::Burn(op) => HypatiaOptimizationState::Burn(op.to_opt_state()),
            Self::Linear(op) => HypatiaOptimizationState::Linear(
                op.plan().clone(),
                op.alternative_states(),
                op.recompute_states(),
            ),
        }
    }

    fn from_state(device: &R::Device, state: HypatiaOptimizationState) -> Self {
        match state {
            HypatiaOptimizationState::Linear(plan, alternatives, recomputes) => {
                let alternatives = alternatives
                    .into_iter()
                    .map(|state| state.map(|state| Alternative::from_state(device, state)))
                    .collect();
                let recomputes = recomputes
                    .into_iter()
                    .map(|state| state.map(|state| ElemwiseOptimization::from_state(device, state)))
                    .collect();
                Self::Linear(LinearOptimization::with_burn_parts(
                    plan,
                    alternatives,
                    recomputes,
                    device.clone(),
                ))
            }
            HypatiaOptimizationState::Burn(state) => Self::Burn(match state {
                CubeOptimizationState::ElementWise(s) => {
                    CubeOptimization::ElementWise(ElemwiseOptimization::from_state(device, s))
                }
                CubeOptimizationState::Matmul(s) => {
                    CubeOptimization::Matmul(MatmulOptimization::from_state(device, s))
                }
                CubeOptimizationState::Reduce(s) => {
                    CubeOptimization::Reduce(ReduceOptimization::from_state(device, s))
                }
                CubeOptimizationState::ReduceBroadcasted(s) => CubeOptimization::ReduceBroadcasted(
                    ReduceBroadcastedOptimization::from_state(device, s),
                ),
            }),
        }
    }
}

impl<R: CubeRuntime> FusionRuntime for HypatiaRuntime<R> {
    type OptimizationState = HypatiaOptimizationState;
    type Optimization = HypatiaOptimization<R>;
    type FusionHandle = CubeFusionHandle<R>;
    type FusionDevice = R::Device;

    /// Hypatia's fuser first; Burn's four after it, in Burn's order.
    fn fusers(device: R::Device) -> Vec<Box<dyn OperationFuser<Self::Optimization>>> {
        vec![
            Box::new(HypatiaFuser::<R>::new(device.clone())),
            Box::new(BurnFuser::new(ElementWiseFuser::<R>::new(device.clone()))),
            Box::new(BurnFuser::new(MatmulFuser::<R>::new(device.clone()))),
            Box::new(BurnFuser::new(ReduceFuser::<R>::new(
                device.clone(),
                ReduceSettings::Always,
            ))),
            Box::new(BurnFuser::new(ReduceBroadcastedFuser::<R>::new(device))),
        ]
    }
}

//! [`HypatiaFusion`]: burn-fusion's `Fusion<HypatiaBackend>`, every op forwarded, with Hypatia's
//! submission and `sync` (`host::submit`).

use super::HypatiaBackend;
use super::forward::{forward_backend, forward_backend_ir};
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{Backend, BackendTypes, ExecutionError};
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_fusion::{Fusion, FusionTensor};
use burn_ir::BackendIr;
use core::marker::PhantomData;

use crate::runtime::HypatiaRuntime;

/// burn-fusion's backend over [`HypatiaBackend`], which [`HypatiaFusion`] forwards to.
pub(crate) type Fused<R, F, I, BT> = Fusion<HypatiaBackend<R, F, I, BT>>;

/// What [`Hypatia<B>`](crate::Hypatia) names: burn-fusion's `Fusion<HypatiaBackend<..>>` (same
/// tensors, same op stream, same fusers), except that under the default policies the ops are
/// handed to burn-fusion's thread as they are recorded (so they are fused while the caller
/// records the next ones), and `sync` spins on burn-fusion's answer before parking (see
/// `host::submit`, [`SubmitPolicy`](crate::config::SubmitPolicy) and
/// [`SyncPolicy`](crate::config::SyncPolicy)).
pub struct HypatiaFusion<R, F = f32, I = i32, BT = u8> {
    _types: PhantomData<(R, F, I, BT)>,
}

impl<R, F, I, BT> core::fmt::Debug for HypatiaFusion<R, F, I, BT> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("HypatiaFusion")
    }
}

impl<R, F, I, BT> Clone for HypatiaFusion<R, F, I, BT> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<R, F, I, BT> Default for HypatiaFusion<R, F, I, BT> {
    fn default() -> Self {
        Self {
            _types: PhantomData,
        }
    }
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> BackendTypes
    for HypatiaFusion<R, F, I, BT>
{
    type Device = R::Device;
    type FloatTensorPrimitive = FusionTensor<HypatiaRuntime<R>>;
    type FloatElem = F;
    type IntTensorPrimitive = FusionTensor<HypatiaRuntime<R>>;
    type IntElem = I;
    type BoolTensorPrimitive = FusionTensor<HypatiaRuntime<R>>;
    type BoolElem = BT;
    type QuantizedTensorPrimitive = FusionTensor<HypatiaRuntime<R>>;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> Backend
    for HypatiaFusion<R, F, I, BT>
{
    fn name(device: &Self::Device) -> String {
        format!("fusion<{}>", HypatiaBackend::<R, F, I, BT>::name(device))
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        let policy = crate::config::config().sync;
        crate::host::submit::fusion_sync::<HypatiaBackend<R, F, I, BT>>(device, policy)
    }

    forward_backend!(Fused<R, F, I, BT>, crate::host::stream::configure());
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> BackendIr
    for HypatiaFusion<R, F, I, BT>
{
    forward_backend_ir!(Fused<R, F, I, BT>);
}

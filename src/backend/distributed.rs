//! Burn's collectives (feature `distributed`): both Hypatia backends forward `all_reduce` and
//! `sync_collective`, so DDP runs through Burn's own engines (NCCL on CUDA).
//!
//! With `burn/distributed` on, `Autodiff<B>` is an `AutodiffBackend` only where
//! `B: DistributedBackend`; without these impls `Autodiff<Hypatia<B>>` could not train at all.
//! The gradient-sync server of `Autodiff<Hypatia<B>>` is keyed by [`HypatiaFusion`]'s type and
//! uses the trait's default methods; its `all_reduce` is recorded into Hypatia's op stream as
//! `OperationIr::Distributed`, which the fuser never claims (an opaque op closes its window,
//! see [`OpKind::is_pattern_kind`](crate::capture::OpKind::is_pattern_kind)), and runs on the
//! inner `CubeBackend`. Each all-reduce is pushed to the GPU as soon as it is recorded
//! ([`collective_recorded`](crate::host::submit::collective_recorded)).

use super::{Fused, HypatiaBackend, HypatiaFusion, Inner};
use burn_backend::DeviceId;
use burn_backend::distributed::{CollectiveTensor, DistributedBackend, ReduceOperation};
use burn_backend::tensor::{Device, FloatTensor};
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> DistributedBackend
    for HypatiaBackend<R, F, I, BT>
{
    fn all_reduce(
        tensor: FloatTensor<Self>,
        op: ReduceOperation,
        device_ids: Vec<DeviceId>,
    ) -> CollectiveTensor<Self> {
        let reduced = Inner::<R, F, I, BT>::all_reduce(tensor, op, device_ids);
        // Same primitive; the caller (burn-fusion's `AllReduceOps`) resolves it the same way.
        CollectiveTensor::new(unsafe { reduced.assume_resolved() })
    }

    fn sync_collective(device: &Device<Self>) {
        Inner::<R, F, I, BT>::sync_collective(device)
    }
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> DistributedBackend
    for HypatiaFusion<R, F, I, BT>
{
    fn all_reduce(
        tensor: FloatTensor<Self>,
        op: ReduceOperation,
        device_ids: Vec<DeviceId>,
    ) -> CollectiveTensor<Self> {
        let device = tensor.client.device().clone();
        let reduced = Fused::<R, F, I, BT>::all_reduce(tensor, op, device_ids);
        // On the GPU now, whatever this device's training thread does next (decision record 0010).
        let policy = crate::config::config().collective;
        crate::host::submit::collective_recorded::<R, HypatiaBackend<R, F, I, BT>>(&device, policy);
        // Same primitive (`FusionTensor`); `resolve` on it runs `sync_collective` below.
        CollectiveTensor::new(unsafe { reduced.assume_resolved() })
    }

    fn sync_collective(device: &Device<Self>) {
        let sync = Fused::<R, F, I, BT>::sync_collective;
        // Queued on burn-fusion's thread where configured (decision record 0011).
        let policy = crate::config::config().collective;
        if !crate::host::submit::collective_synced::<HypatiaBackend<R, F, I, BT>>(
            device, sync, policy,
        ) {
            sync(device)
        }
    }
}

//! burn-train's Learner on `Autodiff<Hypatia<Wgpu>>` against `Autodiff<Wgpu>`: the
//! `train_learner` example's code, on the handwritten digits (lavapipe in CI).

#[path = "../../examples/common/learner.rs"]
mod example;

use super::common::{from_a_process_of_its_own, serial, side_out};
use example::{Precision, Report, RunArgs, Strategy, Which};

fn args(backend: Which, dir: &str) -> RunArgs {
    RunArgs {
        backend,
        dtype: Precision::F32,
        data: "digits".into(),
        features: 0,
        classes: 0,
        samples: 0,
        hidden: vec![256, 256],
        epochs: 3,
        batch_size: 64,
        lr: 1e-3,
        seed: 42,
        // Batches made on the training thread: with a loader thread, Burn 0.21's fusion gives
        // run-to-run different losses on either backend (decision record 0008).
        workers: 0,
        artifact_dir: Some(std::env::temp_dir().join(dir)),
        cli: true,
        checkpoint: false,
        // The statistics' JSON is printed, so its serialisation runs here too.
        stats: true,
        step_times: false,
    }
}

/// Burn's side: its own fused backend. On CUDA its bools are u32, not `Cuda`'s u8: with u8
/// bools Burn 0.21 alone fails this run, a cached fused-matmul winner tuned on an f32-only
/// trace running a later trace with a `bool` output (decision record 0019). The bool type
/// changes no float op of the run. It runs in a process of its own: Burn 0.21 fixes a device's
/// bool type at the device's first use by any backend (its device-settings registry is keyed
/// by the device's type, which `Hypatia<Cuda>` shares with `Cuda`), so after Hypatia's run in
/// the same process its bools would be `Cuda`'s u8 again (decision record 0032).
#[cfg(feature = "cuda")]
type BurnSide =
    burn_fusion::Fusion<burn_cubecl::CubeBackend<super::common::Runtime, f32, i32, u32>>;
#[cfg(not(feature = "cuda"))]
type BurnSide = example::Inner<f32>;

/// Same seed, same batches: the per-epoch mean losses agree within 5%. With the batches made on
/// the training thread, three runs of each backend printed the same four digits on lavapipe,
/// Hypatia's equal to Burn's (decision record 0008); a fused step that is wrong moves them by
/// far more, and the loss must also fall.
#[test]
fn learner_trains_on_hypatia_as_on_burn() {
    let _serial = serial();
    if let Some(out) = side_out() {
        let burn = example::run_on::<burn::backend::Autodiff<BurnSide>>(
            &args(Which::Burn, "hypatia-learner-b"),
            Strategy::Single,
            example::devices(1),
        );
        out.write(&burn);
        return;
    }
    let device = example::devices(1);
    let hypatia = example::run(
        &args(Which::Hypatia, "hypatia-learner-h"),
        Strategy::Single,
        device.clone(),
    );
    let burn: Report = from_a_process_of_its_own(std::time::Duration::from_secs(1800));
    let fused = hypatia::stats(&device[0]).executed_total();
    assert!(fused > 0, "Hypatia fused no step of the Learner's training");
    for report in [&hypatia, &burn] {
        assert_eq!(report.train_loss.len(), 3, "{report}");
        assert_eq!(report.valid_accuracy.len(), 3, "{report}");
        assert!(
            report.train_loss[2] < 0.6 * report.train_loss[0],
            "{report}"
        );
        assert!(report.valid_accuracy[2] > 80.0, "{report}");
    }
    for (epoch, (h, b)) in hypatia.train_loss.iter().zip(&burn.train_loss).enumerate() {
        let relative = (h - b).abs() / b.abs();
        assert!(
            relative < 0.05,
            "epoch {}: Hypatia's loss {h} against Burn's {b}\nHypatia:\n{hypatia}\nBurn:\n{burn}",
            epoch + 1
        );
    }
}

/// With the `distributed` feature, Burn's collectives reach the op stream as
/// `OperationIr::Distributed`: an op Hypatia never claims (its window closes on it).
#[cfg(feature = "distributed")]
#[test]
fn an_all_reduce_is_opaque_to_the_fuser() {
    let _serial = serial();
    use burn_ir::TensorStatus;
    use burn_ir::{AllReduceOpIr, DistributedOperationIr, OperationIr, TensorId, TensorIr};
    use hypatia::capture::{CapturedOp, OpKind};
    let tensor = |id, status| TensorIr {
        id: TensorId::new(id),
        shape: vec![4, 3].into(),
        status,
        dtype: burn::tensor::DType::F32,
    };
    let op = OperationIr::Distributed(DistributedOperationIr::AllReduce(AllReduceOpIr {
        tensor: tensor(0, TensorStatus::ReadWrite),
        out: tensor(1, TensorStatus::NotInit),
    }));
    let captured = CapturedOp::new(&op);
    assert_eq!(captured.kind, OpKind::Opaque);
    assert!(!captured.kind.is_pattern_kind());
}

/// With the `distributed` feature on, `Autodiff<Hypatia<B>>` is still an `AutodiffBackend`,
/// and one Burn's DDP accepts.
#[cfg(feature = "distributed")]
#[test]
fn autodiff_hypatia_is_a_distributed_autodiff_backend() {
    let _serial = serial();
    fn ddp_ready<
        B: burn::tensor::backend::AutodiffBackend
            + burn::tensor::backend::distributed::DistributedBackend,
    >() {
    }
    ddp_ready::<burn::backend::Autodiff<hypatia::Hypatia<example::Inner<f32>>>>();
    let devices = example::devices(1);
    let _ = burn::train::ExecutionStrategy::<
        burn::backend::Autodiff<hypatia::Hypatia<example::Inner<f32>>>,
    >::ddp(
        devices,
        burn::tensor::backend::distributed::DistributedConfig {
            all_reduce_op: burn::tensor::backend::distributed::ReduceOperation::Mean,
        },
    );
}

//! The op stream Burn 0.21 emits for the backward pass of a Linear-ReLU-Linear-ReLU-Linear MLP
//! under `Autodiff<Hypatia<..>>`, captured with burn-fusion's inspector and compared with the
//! committed fixture `tests/fixtures/mlp_backward.json`, the stream Hypatia's backward rules
//! are written against. When Burn changes what it emits, this test says so.
//! `HYPATIA_BLESS=1` rewrites the fixture from the capture.

use super::common::*;
use burn::backend::Autodiff;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn_fusion::inspect::FusionInspector;
use burn_fusion::stream::StreamId;
use burn_ir::OperationIr;
use serde_json::Value;
use std::collections::HashMap;

/// The committed fixture (see [`repo_file`]).
fn fixture() -> std::path::PathBuf {
    repo_file("tests/fixtures/mlp_backward.json")
}

type Train = Autodiff<Fused>;

/// The ops of one backward pass, in the order they were registered.
fn capture_backward() -> Vec<OperationIr> {
    let device = device();
    let layer = |d_in, d_out| LinearConfig::new(d_in, d_out).init::<Train>(&device);
    let layers: [Linear<Train>; 3] = [layer(8, 16), layer(16, 12), layer(12, 4)];
    let x = Tensor::<Train, 2>::from_data(data(31, &[5, 8], 1.0), &device);
    let hidden = relu(layers[1].forward(relu(layers[0].forward(x))));
    let loss = layers[2].forward(hidden).powi_scalar(2).mean();
    Train::sync(&device).expect("sync");

    let inspector = FusionInspector::install(StreamId::current());
    let grads = loss.backward();
    Train::sync(&device).expect("sync");
    let mut ops: Vec<OperationIr> = inspector
        .drain()
        .into_iter()
        .flat_map(|report| report.blocks)
        .flat_map(|block| block.operations)
        .filter(|op| !matches!(op, OperationIr::Drop(_) | OperationIr::Init(_)))
        .collect();
    drop(grads);
    // Execution may run an op ahead of its registration order (burn-fusion moves an unfused
    // op into an earlier block); ids are handed out at registration, so they restore it.
    ops.sort_by_key(|op| op.outputs().map(|t| t.id).min());
    ops
}

/// The ops as JSON with tensor ids renumbered by first appearance, so that the fixture does
/// not depend on how many tensors the process made before, and bool storage left out (u32 on
/// wgpu, u8 on CUDA).
fn normalise(ops: &[OperationIr]) -> Value {
    fn walk(value: &mut Value, ids: &mut HashMap<String, usize>) {
        match value {
            Value::Object(map) if map.len() == 1 && map.contains_key("Bool") => {
                *value = Value::from("Bool");
            }
            Value::Object(map) => {
                if map.contains_key("status")
                    && map.contains_key("shape")
                    && let Some(id) = map.get_mut("id")
                {
                    let next = ids.len();
                    let index = *ids.entry(id.to_string()).or_insert(next);
                    *id = Value::from(format!("t{index}"));
                }
                map.values_mut().for_each(|v| walk(v, ids));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, ids)),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(ops).expect("OperationIr serialises");
    walk(&mut value, &mut HashMap::new());
    value
}

#[test]
fn mlp_backward_stream_matches_the_fixture() {
    let _serial = serial();
    let captured = normalise(&capture_backward());
    if std::env::var("HYPATIA_BLESS").is_ok_and(|v| v == "1") {
        let text = serde_json::to_string_pretty(&captured).unwrap();
        std::fs::write(fixture(), text + "\n").expect("write the fixture");
    }
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture()).expect("tests/fixtures/mlp_backward.json"),
    )
    .expect("the fixture is JSON");
    let (captured, fixture) = (
        captured.as_array().expect("a list of ops"),
        fixture.as_array().expect("a list of ops"),
    );
    for (index, (op, expected)) in captured.iter().zip(fixture).enumerate() {
        assert_eq!(op, expected, "op {index} differs from the fixture");
    }
    assert_eq!(captured.len(), fixture.len(), "number of backward ops");
}

/// The fixture holds what the backward rules need: per layer `dx = dy · swap_dims(W)`,
/// `dW = swap_dims(x) · dy`, `db = reshape(sum_dim(dy, 0))`, and ReLU's backward as
/// `mask_fill(dx, lower_equal_elem(pre, 0), 0)` on the pre-activation.
#[test]
fn fixture_has_each_layers_backward_ops() {
    let _serial = serial();
    let fixture: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture()).expect("fixture")).unwrap();
    let names: Vec<String> = fixture.as_array().unwrap().iter().map(op_name).collect();
    let count = |name: &str| names.iter().filter(|n| n.as_str() == name).count();
    // Three layers: dW and db for each, dx for the two above the input.
    assert_eq!(count("Matmul"), 5, "{names:?}");
    assert_eq!(count("SumDim"), 3, "{names:?}");
    assert_eq!(count("SwapDims"), 5, "{names:?}");
    // Two ReLUs.
    assert_eq!(count("LowerEqualElem"), 2, "{names:?}");
    assert_eq!(count("MaskFill"), 2, "{names:?}");
}

/// `{"BaseFloat": {"SwapDims": ..}}` → `SwapDims`; `{"Float": ["F32", {"Matmul": ..}]}` →
/// `Matmul`.
fn op_name(op: &Value) -> String {
    let (_, inner) = op.as_object().unwrap().iter().next().unwrap();
    let inner = match inner {
        Value::Array(items) => items.last().unwrap(),
        other => other,
    };
    match inner {
        Value::Object(map) => map.keys().next().unwrap().clone(),
        Value::String(name) => name.clone(),
        other => other.to_string(),
    }
}

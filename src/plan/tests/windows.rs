//! Windows as burn-fusion hands them over: freed tensors, canonical ids, options, dumps.

use super::*;

/// `Drop(id)` of a tensor with `id`, as burn-fusion records a freed tensor.
fn drop_op(id: u64) -> burn_ir::OperationIr {
    burn_ir::OperationIr::Drop(burn_ir::TensorIr {
        id: TensorId::new(id),
        shape: burn_std::Shape::from(vec![3]),
        status: TensorStatus::ReadWrite,
        dtype: burn_backend::DType::F32,
    })
}

/// The ops of `ir` with `drops` inserted: `(position, id)`, positions in the original ops.
fn window_with_drops(ir: &IrBuilder, outputs: &[T], drops: &[(usize, u64)]) -> Window {
    let mut window = Window::new();
    for (index, op) in ir.ops(outputs).iter().enumerate() {
        for &(_, id) in drops.iter().filter(|(at, _)| *at == index) {
            window.push(&drop_op(id));
        }
        window.push(op);
    }
    window
}

#[test]
fn stray_drops_in_any_order_plan_as_one_window() {
    let mut ir = IrBuilder::new();
    let (x, w, _, y) = linear_relu(&mut ir, &[17, 33]);
    let bare = ir.window(&[y]);
    let a = window_with_drops(&ir, &[y], &[(0, 100), (2, 101)]);
    let b = window_with_drops(&ir, &[y], &[(0, 101), (0, 100), (4, 102)]);
    let (ca, cb) = (a.canonical(), b.canonical());
    let canonical_bare = bare.canonical();
    assert_eq!(ca.window.ops(), canonical_bare.window.ops());
    assert_eq!(cb.window.ops(), canonical_bare.window.ops());
    assert_eq!(ca.key(OPTIONS), canonical_bare.key(OPTIONS));
    assert_eq!(cb.key(OPTIONS), canonical_bare.key(OPTIONS));
    let other = PlanOptions {
        relu_grads: false,
        activation_grads: false,
        ..OPTIONS
    };
    assert_ne!(
        ca.key(OPTIONS),
        ca.key(other),
        "options are part of the key"
    );
    assert_eq!(ca.ops, [1, 2, 4, 5, 6]);

    let compact = fused(plan_window(&ca.window, &Limits::default(), OPTIONS).claim);
    for (window, canonical) in [(&a, &ca), (&b, &cb)] {
        let on_window = compact.on_window(canonical);
        assert_eq!(on_window.len, window.len());
        // Every op of the prefix runs exactly once: a drop as Burn's op, the rest fused.
        let mut runs: Vec<usize> = on_window
            .steps
            .iter()
            .flat_map(|step| match step {
                Step::Run(index) | Step::BiasGrad(index) => vec![*index],
                Step::Fused(fused) => fused.ops.clone(),
            })
            .collect();
        runs.sort_unstable();
        assert_eq!(runs, (0..window.len()).collect::<Vec<_>>());
        for step in on_window.fused() {
            assert!(
                step.ops
                    .iter()
                    .all(|&i| window.ops()[i].kind != OpKind::Bookkeeping)
            );
            assert!(step.matmul_ops.iter().all(|i| step.ops.contains(i)));
            assert_eq!((step.x.id, step.w.id, step.out), (id(x), id(w), id(y)));
        }
    }
}

#[test]
fn drops_of_window_tensors_are_planned() {
    let mut ir = IrBuilder::new();
    let (x, .., y) = linear_relu(&mut ir, &[17, 33]);
    // Dropping x (which the matmul reads) is part of the window's dataflow: it stays.
    let window = window_with_drops(&ir, &[y], &[(2, x.0)]);
    let canonical = window.canonical();
    assert_eq!(canonical.window.len(), window.len());
    assert_eq!(canonical.ops, (0..window.len()).collect::<Vec<_>>());
}

#[test]
fn canonical_windows_plan_on_the_ids_they_came_from() {
    // The same Linear + relu after ten other tensors (ids shifted by 10, dims renumbered).
    let mut ir = IrBuilder::new();
    for _ in 0..10 {
        ir.input(&[5, 7]);
    }
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    let window = ir.window(&[y]);
    let canonical = window.canonical();
    let planned = fused(plan_window(&canonical.window, &Limits::default(), OPTIONS).claim);
    assert_eq!(planned.on_window(&canonical), fused(plan(&ir, &[y])));
}

#[test]
fn options_turn_linear_relu_off() {
    let mut ir = IrBuilder::new();
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    let off = PlanOptions {
        linear_relus: false,
        ..OPTIONS
    };
    let planned = plan_window(&ir.window(&[y]), &Limits::default(), off).claim;
    assert_eq!(planned, Claim::Declined(Reason::NoMatch));
}

#[test]
fn dumps_record_the_claim_and_every_alternative() {
    let mut ir = IrBuilder::new();
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    let window = ir.window(&[y]);
    let (planned, dump) = crate::plan::dump::explain_window(&window, &Limits::default(), OPTIONS);
    assert_eq!(planned.claim, plan(&ir, &[y]));
    assert_eq!(dump.claim, planned.claim);
    assert_eq!(dump.window.len(), window.len());
    assert!(dump.window[0].contains("= matmul("), "{:?}", dump.window);
    // Roots: the matmul, the bias add, then relu's mask_fill; the relu's class holds the fused
    // node and the unfused `mask-fill`, which costs more.
    assert_eq!(dump.alternatives.len(), 3, "{:?}", dump.alternatives);
    let relu = &dump.alternatives[2];
    assert_eq!(relu.tensor, window.ops().last().unwrap().out().id.value());
    let cheapest = &relu.terms[0];
    assert!(
        cheapest.term.starts_with("(fused-linear-relu"),
        "{cheapest:?}"
    );
    let unfused = relu.terms.iter().find(|t| t.term.starts_with("(mask-fill"));
    assert!(unfused.is_some_and(|t| t.cost > cheapest.cost), "{relu:?}");
    assert!(relu.terms.windows(2).all(|p| p[0].cost <= p[1].cost));
    assert!(dump.egraph.nodes >= dump.egraph.classes && dump.egraph.classes > 0);
    assert_eq!(dump.egraph.stop_reason, "Saturated");

    let dir = std::env::temp_dir().join(format!("hypatia-dump-test-{}", std::process::id()));
    let json = dump.write(&dir, 0xabc).unwrap();
    assert_eq!(json.file_name().unwrap(), "window-0000000000000abc.json");
    let read = crate::plan::dump::Dump::read(&json).unwrap();
    assert_eq!(read.claim, dump.claim);
    assert_eq!(read.alternatives.len(), dump.alternatives.len());
    assert!(read.dot.starts_with("digraph") && read.dot.contains("fused-linear-relu"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn dumps_say_why_a_window_was_declined() {
    let mut ir = IrBuilder::new();
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    let off = PlanOptions {
        linear_relus: false,
        ..OPTIONS
    };
    let (_, dump) = crate::plan::dump::explain_window(&ir.window(&[y]), &Limits::default(), off);
    assert_eq!(dump.claim, Claim::Declined(Reason::NoMatch));
    let json = serde_json::to_string(&dump).unwrap();
    assert!(json.contains("\"Declined\":\"NoMatch\""), "{json}");
}

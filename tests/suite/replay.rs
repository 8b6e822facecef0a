//! Plans are cached: the e-graph runs once per distinct window, never per call.

use super::common::*;
use super::model::Mlp;
use burn::prelude::*;

#[test]
fn egg_runs_once_per_distinct_window() {
    let _serial = serial();
    let device = device();
    let model = Mlp::<Fused>::new([24, 40, 40, 4], true, &device);
    let x = Tensor::<Fused, 2>::from_data(data(5, &[19, 24], 1.0), &device);
    // The first calls see different windows (parameters and inputs are registered from host
    // data then); after them every call replays the same window.
    let first = model.forward(x.clone()).into_data();
    for _ in 0..2 {
        let _ = model.forward(x.clone()).into_data();
    }
    let egg_runs = hypatia::stats(&device).egg.runs;
    let before = executed();
    for _ in 0..10 {
        let again = model.forward(x.clone()).into_data();
        assert_close(&again, &first, 0.0);
    }
    let stats = hypatia::stats(&device);
    assert_eq!(
        stats.egg.runs, egg_runs,
        "replays must not run egg: {stats:?}"
    );
    assert_eq!(
        executed() - before,
        20,
        "each replay runs both fused layers"
    );
}

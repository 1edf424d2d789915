//! The recurrent modules against PyTorch/TorchRL reference outputs and gradients
//! (`$RECUR_REFERENCE_DIR/rnn`, see its README for the exact semantics).

mod support;

use burn::tensor::{Bool, Tensor, TensorData};
use recur_rnn::burn_backend::cpu_device;
use recur_rnn::{
    set_recurrent_mode, CellKind, Recompute, RecurrentBackend, RecurrentConfig, RecurrentCore,
    RecurrentMode, RecurrentState,
};
use serde_json::Value;
use support::*;

const FILES: [&str; 6] = [
    "lstm_l1",
    "lstm_l2",
    "gru_l1",
    "gru_l2",
    "mingru_l1",
    "mingru_l2",
];
const ABS: f32 = 1e-5;
const GRAD_REL: f32 = 1e-4;

fn module(file: &Value, backend: RecurrentBackend, recompute: Recompute) -> RecurrentCore<B> {
    let cell: CellKind = file["cell"].as_str().unwrap().parse().unwrap();
    let config = RecurrentConfig::new(
        file["input_size"].as_u64().unwrap() as usize,
        file["hidden_size"].as_u64().unwrap() as usize,
    )
    .with_num_layers(file["num_layers"].as_u64().unwrap() as usize)
    .with_bias(file["bias"].as_bool().unwrap())
    .with_backend(backend)
    .with_recompute(recompute);
    let device = cpu_device();
    let core = match cell {
        CellKind::Lstm => config.init_lstm::<B>(&device).unwrap().core,
        CellKind::Gru => config.init_gru::<B>(&device).unwrap().core,
        CellKind::MinGru => config.init_mingru::<B>(&device).unwrap().core,
    };
    let expected: Vec<String> = file["param_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        core.param_names(),
        expected,
        "parameter names and order follow PyTorch"
    );
    core.load_parameters(params(file)).unwrap()
}

fn data<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    values(t.into_data())
}

fn reference(v: &Value) -> Vec<f32> {
    floats(v).1
}

/// The recurrent-mode case over `[B, T]`, every backend: outputs, loss and every gradient.
fn check_packed(name: &str, backend: RecurrentBackend, recompute: Recompute, flat: bool) {
    let file = load_json(&format!("rnn/{name}.json"));
    let core = module(&file, backend, recompute);
    assert_eq!(core.backend(), backend, "the backend asked for runs");
    let rp = &file["recurrent_packed"];
    let what = |x: &str| {
        format!(
            "{name}/{}{}{}/{x}",
            backend.name(),
            if recompute == Recompute::Full {
                "/recompute=full"
            } else {
                ""
            },
            if flat { "/flat" } else { "" }
        )
    };

    let obs: Tensor<B, 3> = tensor(&rp["obs"]).require_grad();
    let rs_h: Tensor<B, 4> = tensor(&rp["rs_h"]).require_grad();
    let rs_c: Option<Tensor<B, 4>> = rp.get("rs_c").map(|v| tensor(v).require_grad());
    let is_init: Tensor<B, 2, Bool> = flags(&rp["is_init"]);
    let [b, t, l, h] = rs_h.dims();
    let state = RecurrentState {
        rs_h: rs_h.clone(),
        rs_c: rs_c.clone(),
    };

    let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
    let (features, next) = if flat {
        // The flat packed layout of a slice sampler: both rows back to back on one time axis;
        // row 1 starts with is_init, so it is a correct flat batch of the same trajectories.
        let out = core
            .forward(
                obs.clone().reshape([b * t, 5]),
                is_init.clone().reshape([b * t]),
                state.map(|e| e.reshape([b * t, l, h])),
            )
            .unwrap();
        (
            out.features.reshape([b, t, h]),
            out.next.map(|e| e.reshape([b, t, l, h])),
        )
    } else {
        let out = core.forward_batch(obs.clone(), is_init, state).unwrap();
        (out.features, out.next)
    };

    assert_close(
        &what("features"),
        &data(features.clone()),
        &reference(&rp["features"]),
        ABS,
        0.0,
    );
    assert_close(
        &what("next_rs_h"),
        &data(next.rs_h),
        &expected_next_h(rp),
        ABS,
        0.0,
    );
    if let Some(c) = next.rs_c {
        assert_close(
            &what("next_rs_c"),
            &data(c),
            &reference(&rp["next_rs_c"]),
            ABS,
            0.0,
        );
    }

    let g: Tensor<B, 3> = tensor(&rp["G"]);
    let loss = (features * g).sum();
    let want_loss = rp["loss"].as_f64().unwrap() as f32;
    assert_close(&what("loss"), &data(loss.clone()), &[want_loss], ABS, 0.0);

    let grads = loss.backward();
    let want = &rp["grad"];
    for (param, got) in core.named_grads(&grads) {
        assert_close(
            &what(&format!("grad.{param}")),
            &values(got),
            &reference(&want[&param]),
            ABS,
            GRAD_REL,
        );
    }
    let input_grad = |t: &Tensor<B, 4>| values(t.grad(&grads).expect("a gradient").into_data());
    assert_close(
        &what("grad.obs"),
        &values(obs.grad(&grads).unwrap().into_data()),
        &reference(&want["obs"]),
        ABS,
        GRAD_REL,
    );
    assert_close(
        &what("grad.rs_h"),
        &input_grad(&rs_h),
        &reference(&want["rs_h"]),
        ABS,
        GRAD_REL,
    );
    if let Some(c) = &rs_c {
        assert_close(
            &what("grad.rs_c"),
            &input_grad(c),
            &reference(&want["rs_c"]),
            ABS,
            GRAD_REL,
        );
    }
}

/// The step-by-step case: our own `next` state is carried into the following step.
fn check_sequential(name: &str) {
    let file = load_json(&format!("rnn/{name}.json"));
    let core = module(&file, RecurrentBackend::Auto, Recompute::None);
    assert_eq!(
        core.recurrent_mode(),
        RecurrentMode::Sequential,
        "sequential is the default mode"
    );
    let seq = &file["sequential"];
    let device = cpu_device();
    let mut carried: Option<RecurrentState<B, 3>> = None;
    // LSTM/GRU files: `step_data` and a count `steps`; minGRU files: `steps` and a count `T`.
    let (records, count) = match seq.get("step_data") {
        Some(records) => (records.as_array().unwrap(), &seq["steps"]),
        None => (seq["steps"].as_array().unwrap(), &seq["T"]),
    };
    for step in records {
        let t = step["t"].as_u64().unwrap();
        let what = |x: &str| format!("{name}/sequential/t={t}/{x}");
        let (shape, init) = bools(&step["is_init"]);
        let is_init = Tensor::<B, 1, Bool>::from_data(TensorData::new(init, [shape[0]]), &device);
        let state = carried.take().unwrap_or_else(|| RecurrentState {
            rs_h: tensor(&step["rs_h_in"]),
            rs_c: step.get("rs_c_in").map(tensor),
        });
        // Our carried state must be the reference's incoming state.
        assert_close(
            &what("rs_h_in"),
            &data(state.rs_h.clone()),
            &reference(&step["rs_h_in"]),
            ABS,
            0.0,
        );
        let out = core.forward(tensor(&step["obs"]), is_init, state).unwrap();
        assert_close(
            &what("features"),
            &data(out.features),
            &reference(&step["features"]),
            ABS,
            0.0,
        );
        assert_close(
            &what("next_rs_h"),
            &data(out.next.rs_h.clone()),
            &reference(&step["next_rs_h"]),
            ABS,
            0.0,
        );
        if let Some(c) = &out.next.rs_c {
            assert_close(
                &what("next_rs_c"),
                &data(c.clone()),
                &reference(&step["next_rs_c"]),
                ABS,
                0.0,
            );
        }
        carried = Some(out.next);
    }
    assert_eq!(records.len(), count.as_u64().unwrap() as usize);
}

#[test]
fn recurrent_mode_pad_matches_reference() {
    for name in FILES {
        check_packed(name, RecurrentBackend::Pad, Recompute::None, false);
    }
}

#[test]
fn recurrent_mode_scan_matches_reference() {
    for name in FILES {
        check_packed(name, RecurrentBackend::Scan, Recompute::None, false);
    }
}

#[test]
fn recurrent_mode_fused_matches_reference() {
    for name in FILES {
        check_packed(name, RecurrentBackend::Fused, Recompute::None, false);
    }
}

#[test]
fn recurrent_mode_fused_with_recompute_matches_reference() {
    for name in FILES {
        check_packed(name, RecurrentBackend::Fused, Recompute::Full, false);
    }
}

#[test]
fn flat_packed_layout_matches_reference() {
    for name in FILES {
        for (backend, recompute) in [
            (RecurrentBackend::Pad, Recompute::None),
            (RecurrentBackend::Scan, Recompute::None),
            (RecurrentBackend::Fused, Recompute::None),
            (RecurrentBackend::Fused, Recompute::Full),
        ] {
            check_packed(name, backend, recompute, true);
        }
    }
}

#[test]
fn sequential_mode_matches_reference_step_by_step() {
    for name in FILES {
        check_sequential(name);
    }
}

#[test]
fn reference_files_are_present() {
    for name in FILES {
        let path = format!("rnn/{name}.json");
        assert!(
            reference_path_exists(&path),
            "missing reference file {path}"
        );
    }
}

/// The tests read whatever `RECUR_REFERENCE_DIR` names, and a changed value in it fails them:
/// this binary runs its own sequential-mode test twice against a copy of the reference data,
/// once as it is (passes) and once with one feature value moved by 1e-3 (fails, naming it).
#[test]
fn reference_dir_override_is_read_and_a_changed_value_fails() {
    if std::env::var_os("RECUR_REFERENCE_SELF_TEST").is_some() {
        return; // the child runs below; never recurse
    }
    let source = reference_dir().join("rnn");
    let copy = std::env::temp_dir().join(format!("recur-reference-copy-{}", std::process::id()));
    let rnn = copy.join("rnn");
    std::fs::create_dir_all(&rnn).unwrap();
    for name in FILES {
        let file = format!("{name}.json");
        std::fs::copy(source.join(&file), rnn.join(&file)).unwrap();
    }
    let run = || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sequential_mode_matches_reference_step_by_step",
                "--test-threads",
                "1",
            ])
            .env("RECUR_REFERENCE_DIR", &copy)
            .env("RECUR_REFERENCE_SELF_TEST", "1")
            .output()
            .unwrap()
    };
    let intact = run();
    assert!(
        intact.status.success(),
        "the unchanged copy must pass: {}",
        String::from_utf8_lossy(&intact.stdout)
    );

    let path = rnn.join("lstm_l1.json");
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let value = &mut file["sequential"]["step_data"][3]["features"]["data"][5];
    *value = Value::from(value.as_f64().unwrap() + 1e-3);
    std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
    let changed = run();
    let _ = std::fs::remove_dir_all(&copy);
    let out = String::from_utf8_lossy(&changed.stdout);
    assert!(
        !changed.status.success(),
        "a reference value moved by 1e-3 must fail the test: {out}"
    );
    assert!(
        out.contains("lstm_l1/sequential/t=3/features"),
        "the failure names the changed value: {out}"
    );
}

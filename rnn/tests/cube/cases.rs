// The cases of the CubeCL kernel tests, shared by `cube_kernels.rs` (wgpu) and
// `cube_kernels_cuda.rs` (CUDA): the including file defines `G` (the autodiff backend) and
// `Plain` (the same without autodiff) and declares `mod support`.

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, Tensor, TensorData};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use recur_rnn::burn_backend::{cpu_device, CpuAutodiff};
use recur_rnn::{
    set_recurrent_mode, CellKind, MatmulPrecision, Recompute, RecurrentBackend, RecurrentConfig,
    RecurrentCore, RecurrentMode, RecurrentState,
};
use serde_json::Value;
use support::{assert_close, bools, expected_next_h, floats, load_json, params, values};

const FILES: [&str; 6] = [
    "lstm_l1", "lstm_l2", "gru_l1", "gru_l2", "mingru_l1", "mingru_l2",
];

/// `(abs, rel)` tolerances against the float32 PyTorch reference, per precision: `ieee` as
/// the CPU backends (the kernel sums in another order than PyTorch's GEMM); `tf32` and `bf16`
/// round the recurrent product's operands to 10 and 7 mantissa bits, errors that grow with
/// `H` and `T` (here `H` = 8, `T` = 6).
fn tolerance(precision: MatmulPrecision) -> (f32, f32) {
    match precision {
        MatmulPrecision::Ieee | MatmulPrecision::Auto => (1e-5, 1e-4),
        MatmulPrecision::Tf32 => (2e-3, 1e-2),
        MatmulPrecision::Bf16 => (1.5e-2, 5e-2),
    }
}

fn device() -> burn::tensor::Device<G> {
    Default::default()
}

fn tensor<Bk: Backend, const D: usize>(v: &Value, device: &Bk::Device) -> Tensor<Bk, D> {
    let (shape, data) = floats(v);
    Tensor::from_data(TensorData::new(data, shape), device)
}

fn module<Bk: Backend>(
    file: &Value,
    backend: RecurrentBackend,
    recompute: Recompute,
    precision: MatmulPrecision,
    device: &Bk::Device,
) -> RecurrentCore<Bk> {
    let cell: CellKind = file["cell"].as_str().unwrap().parse().unwrap();
    let config = RecurrentConfig::new(
        file["input_size"].as_u64().unwrap() as usize,
        file["hidden_size"].as_u64().unwrap() as usize,
    )
    .with_num_layers(file["num_layers"].as_u64().unwrap() as usize)
    .with_bias(file["bias"].as_bool().unwrap())
    .with_backend(backend)
    .with_recompute(recompute)
    .with_matmul_precision(precision);
    RecurrentCore::<Bk>::new(&config, cell, device)
        .unwrap()
        .load_parameters(params(file))
        .unwrap()
}

fn data<Bk: Backend, const D: usize>(t: Tensor<Bk, D>) -> Vec<f32> {
    values(t.into_data())
}

/// One reference file through the kernels: outputs, loss and every gradient.
fn check_reference(name: &str, recompute: Recompute, precision: MatmulPrecision, flat: bool) {
    let device = device();
    let file = load_json(&format!("rnn/{name}.json"));
    let core = module::<G>(&file, RecurrentBackend::Auto, recompute, precision, &device);
    assert_eq!(core.backend(), RecurrentBackend::Fused, "auto picks fused");
    let (abs, rel) = tolerance(precision);
    let what = |x: &str| {
        format!(
            "{name}/cube/{}/recompute={}{}/{x}",
            precision.name(),
            recompute.name(),
            if flat { "/flat" } else { "" }
        )
    };
    let rp = &file["recurrent_packed"];
    let reference = |v: &Value| floats(v).1;
    let obs: Tensor<G, 3> = tensor(&rp["obs"], &device).require_grad();
    let rs_h: Tensor<G, 4> = tensor(&rp["rs_h"], &device).require_grad();
    let rs_c: Option<Tensor<G, 4>> = rp.get("rs_c").map(|v| tensor(v, &device).require_grad());
    let (mut shape, init) = bools(&rp["is_init"]);
    shape.pop();
    let is_init = Tensor::<G, 2, Bool>::from_data(TensorData::new(init, shape), &device);
    let [b, t, l, h] = rs_h.dims();
    let state = RecurrentState {
        rs_h: rs_h.clone(),
        rs_c: rs_c.clone(),
    };
    let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
    let (features, next) = if flat {
        let out = core
            .forward(
                obs.clone().reshape([b * t, 5]),
                is_init.reshape([b * t]),
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
    // The largest |kernel - reference| over everything compared (printed: benchmarks/history/
    // states it per precision).
    let worst = std::cell::Cell::new(0.0f32);
    let close = |what: String, got: Vec<f32>, want: &Value, rel: f32| {
        let want = reference(want);
        for (g, w) in got.iter().zip(&want) {
            worst.set(worst.get().max((g - w).abs()));
        }
        assert_close(&what, &got, &want, abs, rel)
    };
    close(
        what("features"),
        data(features.clone()),
        &rp["features"],
        0.0,
    );
    let want_next = expected_next_h(rp);
    assert_close(&what("next_rs_h"), &data(next.rs_h), &want_next, abs, 0.0);
    if let Some(c) = next.rs_c {
        close(what("next_rs_c"), data(c), &rp["next_rs_c"], 0.0);
    }
    let g: Tensor<G, 3> = tensor(&rp["G"], &device);
    let loss = (features * g).sum();
    let want_loss = rp["loss"].as_f64().unwrap() as f32;
    assert_close(&what("loss"), &data(loss.clone()), &[want_loss], abs, rel);
    let grads = loss.backward();
    let want = &rp["grad"];
    for (param, got) in core.named_grads(&grads) {
        close(
            what(&format!("grad.{param}")),
            values(got),
            &want[&param],
            rel,
        );
    }
    let grad = |t: &Tensor<G, 3>| values(t.grad(&grads).expect("a gradient").into_data());
    close(what("grad.obs"), grad(&obs), &want["obs"], rel);
    let grad4 = |t: &Tensor<G, 4>| values(t.grad(&grads).expect("a gradient").into_data());
    close(what("grad.rs_h"), grad4(&rs_h), &want["rs_h"], rel);
    if let Some(c) = &rs_c {
        close(what("grad.rs_c"), grad4(c), &want["rs_c"], rel);
    }
    eprintln!(
        "{}: max |kernel - reference| = {:e}",
        what("*"),
        worst.get()
    );
}

#[test]
fn kernels_match_reference_in_ieee() {
    for name in FILES {
        for recompute in [Recompute::None, Recompute::Full] {
            for flat in [false, true] {
                check_reference(name, recompute, MatmulPrecision::Ieee, flat);
            }
        }
    }
}

#[test]
fn kernels_match_reference_in_tf32_and_bf16() {
    for name in FILES {
        for precision in [MatmulPrecision::Tf32, MatmulPrecision::Bf16] {
            check_reference(name, Recompute::None, precision, false);
        }
    }
}

/// `tf32` and `bf16` are not `ieee` in disguise: the rounded products differ from the `f32`
/// ones (and `auto` is `ieee`, bit for bit).
#[test]
fn reduced_precisions_round_the_recurrent_product() {
    let file = load_json("rnn/lstm_l2.json");
    let features = |precision| {
        let core = module::<Plain>(
            &file,
            RecurrentBackend::Fused,
            Recompute::None,
            precision,
            &device(),
        );
        let rp = &file["recurrent_packed"];
        let (mut shape, init) = bools(&rp["is_init"]);
        shape.pop();
        let is_init = Tensor::<Plain, 2, Bool>::from_data(TensorData::new(init, shape), &device());
        let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
        let out = core
            .forward_batch(
                tensor(&rp["obs"], &device()),
                is_init,
                RecurrentState {
                    rs_h: tensor(&rp["rs_h"], &device()),
                    rs_c: Some(tensor(&rp["rs_c"], &device())),
                },
            )
            .unwrap();
        data(out.features)
    };
    let ieee = features(MatmulPrecision::Ieee);
    assert_eq!(features(MatmulPrecision::Auto), ieee);
    for precision in [MatmulPrecision::Tf32, MatmulPrecision::Bf16] {
        assert_ne!(features(precision), ieee, "{precision:?}");
    }
}

/// A random problem: module shape, batch, resets and data.
#[derive(Clone, Debug)]
struct Case {
    cell: CellKind,
    input: usize,
    hidden: usize,
    layers: usize,
    bias: bool,
    rows: usize,
    steps: usize,
    /// `[rows * steps]`, `t = 0` always true.
    is_init: Vec<bool>,
    seed: u64,
}

fn case_with(hidden: impl Strategy<Value = usize>) -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            Just(CellKind::Lstm),
            Just(CellKind::Gru),
            Just(CellKind::MinGru)
        ],
        1usize..5,
        hidden,
        1usize..4,
        any::<bool>(),
        1usize..4,
        1usize..9,
        0.0f64..1.0,
        any::<u64>(),
    )
        .prop_map(
            |(cell, input, hidden, layers, bias, rows, steps, p, seed)| {
                let mut rng = StdRng::seed_from_u64(seed);
                let is_init = (0..rows * steps)
                    .map(|i| i % steps == 0 || rng.random_bool(p))
                    .collect();
                Case {
                    cell,
                    input,
                    hidden,
                    layers,
                    bias,
                    rows,
                    steps,
                    is_init,
                    seed,
                }
            },
        )
}

impl Case {
    fn config(&self, backend: RecurrentBackend, recompute: Recompute) -> RecurrentConfig {
        RecurrentConfig::new(self.input, self.hidden)
            .with_num_layers(self.layers)
            .with_bias(self.bias)
            .with_backend(backend)
            .with_recompute(recompute)
    }

    /// The module on `Bk`, with the case's own random parameters (the same on every backend).
    fn module<Bk: Backend>(
        &self,
        backend: RecurrentBackend,
        recompute: Recompute,
        device: &Bk::Device,
    ) -> RecurrentCore<Bk> {
        let config = self.config(backend, recompute);
        let core = RecurrentCore::<Bk>::new(&config, self.cell, device).unwrap();
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x5eed);
        let params: Vec<_> = core
            .named_parameters()
            .into_iter()
            .map(|(name, data)| {
                let n = data.num_elements();
                let v: Vec<f32> = (0..n).map(|_| rng.random_range(-0.6f32..0.6)).collect();
                (name, TensorData::new(v, data.shape.clone()))
            })
            .collect();
        core.load_parameters(params).unwrap()
    }

    fn random(&self, salt: u64, len: usize) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(self.seed.wrapping_add(salt));
        (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    fn obs(&self) -> Vec<f32> {
        self.random(1, self.rows * self.steps * self.input)
    }

    fn stored(&self, salt: u64) -> Vec<f32> {
        self.random(salt, self.rows * self.steps * self.layers * self.hidden)
    }
}

/// Recurrent-mode outputs and gradients for loss = sum(features * w) + sum(next_h * w2)
/// (- sum(next_c * w2)), on any autodiff backend.
#[derive(Debug)]
struct Run {
    features: Vec<f32>,
    next_h: Vec<f32>,
    next_c: Option<Vec<f32>>,
    grads: Vec<(String, Vec<f32>)>,
}

// (The case, the module and its device, then the call's data: grouping them would only
// rename the arguments.)
#[allow(clippy::too_many_arguments)]
fn run<Bk: AutodiffBackend>(
    case: &Case,
    core: &RecurrentCore<Bk>,
    device: &Bk::Device,
    obs: Vec<f32>,
    is_init: Vec<bool>,
    (stored_h, stored_c): (Vec<f32>, Vec<f32>),
    weights: Vec<f32>,
    next_loss: bool,
) -> Run {
    let (b, t, l, h) = (case.rows, case.steps, case.layers, case.hidden);
    let t3 = |v: Vec<f32>, s: [usize; 3]| Tensor::<Bk, 3>::from_data(TensorData::new(v, s), device);
    let t4 = |v: Vec<f32>, s: [usize; 4]| Tensor::<Bk, 4>::from_data(TensorData::new(v, s), device);
    let obs = t3(obs, [b, t, case.input]).require_grad();
    let rs_h = t4(stored_h, [b, t, l, h]).require_grad();
    let rs_c = (case.cell == CellKind::Lstm).then(|| t4(stored_c, [b, t, l, h]).require_grad());
    let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
    let result = core
        .forward_batch(
            obs.clone(),
            Tensor::<Bk, 2, Bool>::from_data(TensorData::new(is_init, [b, t]), device),
            RecurrentState {
                rs_h: rs_h.clone(),
                rs_c: rs_c.clone(),
            },
        )
        .unwrap();
    let mut loss = (result.features.clone() * t3(weights, [b, t, h])).sum();
    if next_loss {
        let next_w = t4(case.random(9, b * t * l * h), [b, t, l, h]);
        loss = loss + (result.next.rs_h.clone() * next_w.clone()).sum();
        if let Some(c) = &result.next.rs_c {
            loss = loss - (c.clone() * next_w).sum();
        }
    }
    let grads = loss.backward();
    let mut named: Vec<(String, Vec<f32>)> = core
        .named_grads(&grads)
        .into_iter()
        .map(|(n, d)| (n, values(d)))
        .collect();
    named.push(("obs".into(), values(obs.grad(&grads).unwrap().into_data())));
    named.push((
        "rs_h".into(),
        values(rs_h.grad(&grads).unwrap().into_data()),
    ));
    if let Some(c) = &rs_c {
        named.push(("rs_c".into(), values(c.grad(&grads).unwrap().into_data())));
    }
    Run {
        features: data(result.features),
        next_h: data(result.next.rs_h),
        next_c: result.next.rs_c.map(data),
        grads: named,
    }
}

/// The kernels on wgpu and the CPU fused backend on the same case: every output and gradient.
/// `(abs, rel)`: the two sum in different orders (the CPU backend's blocked GEMM, the kernel's
/// per-unit loop), so the tolerance grows with the length of the sums (`G*H`).
fn cube_vs_cpu(
    case: &Case,
    recompute: Recompute,
    (abs, rel): (f32, f32),
) -> Result<(), TestCaseError> {
    let inputs = || {
        (
            case.obs(),
            case.is_init.clone(),
            (case.stored(2), case.stored(3)),
            case.random(4, case.rows * case.steps * case.hidden),
        )
    };
    let cpu_core = case.module::<CpuAutodiff>(RecurrentBackend::Fused, recompute, &cpu_device());
    let (o, i, s, w) = inputs();
    let want = run(case, &cpu_core, &cpu_device(), o, i, s, w, true);
    let cube_core = case.module::<G>(RecurrentBackend::Fused, recompute, &device());
    let (o, i, s, w) = inputs();
    let got = run(case, &cube_core, &device(), o, i, s, w, true);
    assert_close("features", &got.features, &want.features, abs, 0.0);
    assert_close("next_h", &got.next_h, &want.next_h, abs, 0.0);
    if let (Some(g), Some(w)) = (&got.next_c, &want.next_c) {
        assert_close("next_c", g, w, abs, 0.0);
    }
    prop_assert_eq!(got.grads.len(), want.grads.len());
    for ((name, g), (wname, w)) in got.grads.iter().zip(&want.grads) {
        prop_assert_eq!(name, wname);
        assert_close(&format!("grad.{name}"), g, w, abs, rel);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn kernels_match_the_cpu_fused_backend(case in case_with(1usize..40), full in any::<bool>()) {
        let recompute = if full { Recompute::Full } else { Recompute::None };
        cube_vs_cpu(&case, recompute, tolerance(MatmulPrecision::Ieee))?;
    }

    /// A step-by-step sequential rollout on wgpu (burn's ops) == one recurrent-mode call
    /// through the kernels over the same steps, with the rollout's own incoming states stored.
    #[test]
    fn sequential_rollout_equals_recurrent_mode(case in case_with(1usize..12)) {
        let device = device();
        let core = case.module::<G>(RecurrentBackend::Fused, Recompute::None, &device);
        let (b, t, l, h, i) = (case.rows, case.steps, case.layers, case.hidden, case.input);
        let lh = l * h;
        let obs = case.obs();
        let mut state = RecurrentState {
            rs_h: Tensor::<G, 3>::zeros([b, l, h], &device),
            rs_c: (case.cell == CellKind::Lstm).then(|| Tensor::<G, 3>::zeros([b, l, h], &device)),
        };
        let (mut feats, mut in_h, mut in_c) =
            (vec![0.0; b * t * h], vec![0.0; b * t * lh], vec![0.0; b * t * lh]);
        for step in 0..t {
            let x: Vec<f32> = (0..b)
                .flat_map(|r| obs[(r * t + step) * i..(r * t + step + 1) * i].to_vec())
                .collect();
            let init: Vec<bool> = (0..b).map(|r| case.is_init[r * t + step]).collect();
            let sh = data(state.rs_h.clone());
            let sc = state.rs_c.clone().map(data);
            for r in 0..b {
                if !init[r] {
                    let dst = (r * t + step) * lh;
                    in_h[dst..dst + lh].copy_from_slice(&sh[r * lh..(r + 1) * lh]);
                    if let Some(c) = &sc {
                        in_c[dst..dst + lh].copy_from_slice(&c[r * lh..(r + 1) * lh]);
                    }
                }
            }
            let result = core
                .forward(
                    Tensor::from_data(TensorData::new(x, [b, i]), &device),
                    Tensor::<G, 1, Bool>::from_data(TensorData::new(init, [b]), &device),
                    state,
                )
                .unwrap();
            let f = data(result.features.clone());
            for r in 0..b {
                feats[(r * t + step) * h..(r * t + step + 1) * h].copy_from_slice(&f[r * h..(r + 1) * h]);
            }
            state = result.next;
        }
        let recurrent = run(&case, &core, &device, obs, case.is_init.clone(), (in_h, in_c), vec![0.0; b * t * h], false);
        assert_close("features", &recurrent.features, &feats, 1e-5, 1e-5);
    }

    /// Changing the inputs before an `is_init` of one row, and the stored states at every
    /// non-start step, leaves every output from that `is_init` on bit-identical; the gradient
    /// of the outputs after the boundary w.r.t. anything before it is exactly zero.
    #[test]
    fn nothing_crosses_an_is_init_boundary(case in case_with(1usize..12), row_pick in any::<usize>(), at in any::<usize>()) {
        prop_assume!(case.steps >= 2);
        let device = device();
        let core = case.module::<G>(RecurrentBackend::Fused, Recompute::None, &device);
        let (b, t, h, i, lh) = (case.rows, case.steps, case.hidden, case.input, case.layers * case.hidden);
        let row = row_pick % b;
        let k = 1 + at % (t - 1);
        let mut is_init = case.is_init.clone();
        is_init[row * t + k] = true;
        let obs = case.obs();
        let (sh, sc) = (case.stored(4), case.stored(5));
        let mut obs2 = obs.clone();
        for x in &mut obs2[row * t * i..(row * t + k) * i] { *x = -*x * 3.0 + 0.5; }
        let (mut sh2, mut sc2) = (sh.clone(), sc.clone());
        for p in 0..b * t {
            if !(p % t == 0 || is_init[p]) {
                for x in &mut sh2[p * lh..(p + 1) * lh] { *x += 7.0; }
                for x in &mut sc2[p * lh..(p + 1) * lh] { *x -= 5.0; }
            }
        }
        let mut weights = vec![0.0; b * t * h];
        for x in &mut weights[(row * t + k) * h..(row + 1) * t * h] { *x = 1.0; }
        let a = run(&case, &core, &device, obs, is_init.clone(), (sh, sc), weights.clone(), false);
        let z = run(&case, &core, &device, obs2, is_init, (sh2, sc2), weights, false);
        let after = |v: &[f32], w: usize| v[(row * t + k) * w..(row + 1) * t * w].to_vec();
        prop_assert_eq!(after(&a.features, h), after(&z.features, h));
        prop_assert_eq!(after(&a.next_h, lh), after(&z.next_h, lh));
        if let (Some(ac), Some(zc)) = (&a.next_c, &z.next_c) {
            prop_assert_eq!(after(ac, lh), after(zc, lh));
        }
        let grad = |name: &str| a.grads.iter().find(|(n, _)| n == name).unwrap().1.clone();
        let before = |v: &[f32], w: usize| v[row * t * w..(row * t + k) * w].to_vec();
        prop_assert!(before(&grad("obs"), i).iter().all(|&g| g == 0.0), "obs gradient crossed the boundary");
        prop_assert!(before(&grad("rs_h"), lh).iter().all(|&g| g == 0.0), "rs_h gradient crossed the boundary");
        if case.cell == CellKind::Lstm {
            prop_assert!(before(&grad("rs_c"), lh).iter().all(|&g| g == 0.0), "rs_c gradient crossed the boundary");
        }
    }
}

/// `H` = 300 > 256 units per cube: each unit runs two hidden units.
#[test]
fn hidden_wider_than_a_cube() {
    for cell in [CellKind::Lstm, CellKind::Gru, CellKind::MinGru] {
        let case = Case {
            cell,
            input: 3,
            hidden: 300,
            layers: 2,
            bias: true,
            rows: 2,
            steps: 5,
            is_init: vec![
                true, false, true, false, false, true, true, false, false, true,
            ],
            seed: 7,
        };
        // Sums of G*H = 900 and 1200 terms (measured: 2.5e-5 on a gradient of 0.16).
        cube_vs_cpu(&case, Recompute::None, (1e-4, 1e-3)).unwrap();
    }
}

/// Batches that do not divide into the kernels' row tiles, at hidden sizes that do not divide
/// into warps: the last tile's rows past the batch must change nothing (LSTM and GRU; the
/// tile is the launch's choice, 16 rows or fewer; 2,100 rows tile on a GPU too, where the
/// tile keeps a cube per multiprocessor).
#[test]
fn batch_tiles_with_tails() {
    for cell in [CellKind::Lstm, CellKind::Gru] {
        for hidden in [48, 257] {
            for rows in [1, 17, 130, 2100] {
                let steps = if rows > 1000 { 2 } else { 3 };
                let mut rng = StdRng::seed_from_u64(rows as u64);
                let is_init = (0..rows * steps)
                    .map(|i| i % steps == 0 || rng.random_bool(0.3))
                    .collect();
                let case = Case {
                    cell,
                    input: 3,
                    hidden,
                    layers: 1,
                    bias: true,
                    rows,
                    steps,
                    is_init,
                    seed: 11,
                };
                // Sums of up to G*H = 1028 terms, as in hidden_wider_than_a_cube.
                cube_vs_cpu(&case, Recompute::None, (1e-4, 1e-3))
                    .unwrap_or_else(|e| panic!("{cell:?} H {hidden} B {rows}: {e}"));
            }
        }
    }
}

/// burn's wgpu backend without autodiff (inference) computes what the autodiff path does.
#[test]
fn inference_path_matches_autodiff() {
    let file = load_json("rnn/gru_l2.json");
    let rp = &file["recurrent_packed"];
    let device = device();
    let (mut shape, init) = bools(&rp["is_init"]);
    shape.pop();
    let plain = {
        let core = module::<Plain>(
            &file,
            RecurrentBackend::Auto,
            Recompute::None,
            MatmulPrecision::Auto,
            &device,
        );
        assert_eq!(core.backend(), RecurrentBackend::Fused);
        let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
        let is_init = Tensor::<Plain, 2, Bool>::from_data(
            TensorData::new(init.clone(), shape.clone()),
            &device,
        );
        let out = core
            .forward_batch(
                tensor(&rp["obs"], &device),
                is_init,
                RecurrentState {
                    rs_h: tensor(&rp["rs_h"], &device),
                    rs_c: None,
                },
            )
            .unwrap();
        data(out.features)
    };
    let tracked = {
        let core = module::<G>(
            &file,
            RecurrentBackend::Auto,
            Recompute::None,
            MatmulPrecision::Auto,
            &device,
        );
        let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
        let is_init =
            Tensor::<G, 2, Bool>::from_data(TensorData::new(init.clone(), shape.clone()), &device);
        let out = core
            .forward_batch(
                tensor::<G, 3>(&rp["obs"], &device).require_grad(),
                is_init,
                RecurrentState {
                    rs_h: tensor(&rp["rs_h"], &device),
                    rs_c: None,
                },
            )
            .unwrap();
        data(out.features)
    };
    assert_eq!(plain, tracked);
    assert!(plain.iter().any(|&v| v != 0.0));
}

/// On wgpu `auto` picks `fused`; reduced precision is accepted there and refused on the CPU
/// backends, naming the key and the value.
#[test]
fn config_on_a_cube_device() {
    let config = RecurrentConfig::new(2, 4).with_matmul_precision(MatmulPrecision::Bf16);
    let core = RecurrentCore::<G>::new(&config, CellKind::Gru, &device()).unwrap();
    assert_eq!(core.backend(), RecurrentBackend::Fused);
    let err = RecurrentCore::<CpuAutodiff>::new(&config, CellKind::Gru, &cpu_device())
        .unwrap_err()
        .to_string();
    assert!(err.contains("matmul_precision = \"bf16\""), "{err}");
    let err = RecurrentCore::<G>::new(
        &config.clone().with_backend(RecurrentBackend::Scan),
        CellKind::Gru,
        &device(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("\"scan\""), "{err}");
    assert!("fp8"
        .parse::<MatmulPrecision>()
        .unwrap_err()
        .to_string()
        .contains("\"fp8\""));
}

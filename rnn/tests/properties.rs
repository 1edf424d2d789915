//! Property tests of the recurrent-mode contract on random shapes and random resets (including
//! length-1 trajectories and consecutive resets):
//! - a sequential step-by-step rollout == one recurrent-mode call over the same data, also
//!   for a slice that starts mid-episode from the stored state;
//! - `pad` == `scan` == `fused` (with `recompute` none and full), outputs and every gradient;
//! - boundary isolation: nothing before an `is_init` changes any output after it (bit for
//!   bit), and no gradient flows back across it.

mod support;

use burn::tensor::{Bool, Tensor, TensorData};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use recur_rnn::burn_backend::cpu_device;
use recur_rnn::{
    set_recurrent_mode, CellKind, Recompute, RecurrentBackend, RecurrentConfig, RecurrentCore,
    RecurrentMode, RecurrentState,
};
use support::*;

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

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            Just(CellKind::Lstm),
            Just(CellKind::Gru),
            Just(CellKind::MinGru)
        ],
        1usize..5,
        1usize..6,
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
                // p near 1 gives consecutive resets and length-1 trajectories.
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

/// A backend and its activation-memory policy.
type Variant = (RecurrentBackend, Recompute);

const PAD: Variant = (RecurrentBackend::Pad, Recompute::None);
const SCAN: Variant = (RecurrentBackend::Scan, Recompute::None);
const FUSED: Variant = (RecurrentBackend::Fused, Recompute::None);
const FUSED_FULL: Variant = (RecurrentBackend::Fused, Recompute::Full);

fn variant() -> impl Strategy<Value = Variant> {
    prop_oneof![Just(PAD), Just(SCAN), Just(FUSED), Just(FUSED_FULL)]
}

impl Case {
    fn module(&self, (backend, recompute): Variant) -> RecurrentCore<B> {
        let config = RecurrentConfig::new(self.input, self.hidden)
            .with_num_layers(self.layers)
            .with_bias(self.bias)
            .with_backend(backend)
            .with_recompute(recompute);
        let device = cpu_device();
        // Same seed, same parameters: build once and load into the other backend.
        let scan = config
            .clone()
            .with_backend(RecurrentBackend::Scan)
            .with_recompute(Recompute::None);
        let reference = RecurrentCore::<B>::new(&scan, self.cell, &device).unwrap();
        let params = random_params(&reference, self.seed);
        let core = RecurrentCore::<B>::new(&config, self.cell, &device).unwrap();
        core.load_parameters(params).unwrap()
    }

    fn random(&self, salt: u64, len: usize) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ salt);
        (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    fn obs(&self) -> Vec<f32> {
        self.random(1, self.rows * self.steps * self.input)
    }

    fn stored(&self, salt: u64) -> Vec<f32> {
        self.random(salt, self.rows * self.steps * self.layers * self.hidden)
    }

    fn has_c(&self) -> bool {
        self.cell == CellKind::Lstm
    }
}

fn random_params(core: &RecurrentCore<B>, seed: u64) -> Vec<(String, TensorData)> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xA5A5);
    core.named_parameters()
        .into_iter()
        .map(|(name, data)| {
            let n = data.num_elements();
            let v: Vec<f32> = (0..n).map(|_| rng.random_range(-0.6f32..0.6)).collect();
            (name, TensorData::new(v, data.shape.clone()))
        })
        .collect()
}

fn t3(v: Vec<f32>, s: [usize; 3]) -> Tensor<B, 3> {
    Tensor::from_data(TensorData::new(v, s), &cpu_device())
}
fn t4(v: Vec<f32>, s: [usize; 4]) -> Tensor<B, 4> {
    Tensor::from_data(TensorData::new(v, s), &cpu_device())
}
fn mask2(v: Vec<bool>, s: [usize; 2]) -> Tensor<B, 2, Bool> {
    Tensor::from_data(TensorData::new(v, s), &cpu_device())
}
fn out<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    values(t.into_data())
}

/// Recurrent-mode outputs (features, next_h, next_c) and gradients (params, obs, stored h/c)
/// for loss = sum(features * weights) (+ sum((next_h - next_c) * next_weights) when given).
struct Run {
    features: Vec<f32>,
    next_h: Vec<f32>,
    next_c: Option<Vec<f32>>,
    grads: Vec<(String, Vec<f32>)>,
}

fn run_recurrent(
    case: &Case,
    core: &RecurrentCore<B>,
    obs: Vec<f32>,
    is_init: Vec<bool>,
    stored_h: Vec<f32>,
    stored_c: Vec<f32>,
    loss_weights: Vec<f32>,
) -> Run {
    run_recurrent_with(
        case,
        core,
        obs,
        is_init,
        (stored_h, stored_c),
        loss_weights,
        None,
    )
}

fn run_recurrent_with(
    case: &Case,
    core: &RecurrentCore<B>,
    obs: Vec<f32>,
    is_init: Vec<bool>,
    (stored_h, stored_c): (Vec<f32>, Vec<f32>),
    loss_weights: Vec<f32>,
    next_weights: Option<Vec<f32>>,
) -> Run {
    let (b, t, l, h) = (case.rows, case.steps, case.layers, case.hidden);
    let obs = t3(obs, [b, t, case.input]).require_grad();
    let rs_h = t4(stored_h, [b, t, l, h]).require_grad();
    let rs_c = case
        .has_c()
        .then(|| t4(stored_c, [b, t, l, h]).require_grad());
    let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
    let result = core
        .forward_batch(
            obs.clone(),
            mask2(is_init, [b, t]),
            RecurrentState {
                rs_h: rs_h.clone(),
                rs_c: rs_c.clone(),
            },
        )
        .unwrap();
    let mut loss = (result.features.clone() * t3(loss_weights, [b, t, h])).sum();
    if let Some(w) = next_weights {
        let w = t4(w, [b, t, l, h]);
        loss = loss + (result.next.rs_h.clone() * w.clone()).sum();
        if let Some(c) = &result.next.rs_c {
            loss = loss - (c.clone() * w).sum();
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
        features: out(result.features),
        next_h: out(result.next.rs_h),
        next_c: result.next.rs_c.map(out),
        grads: named,
    }
}

/// Per step (row-major `[B, T, ...]`): features, the incoming state as an actor stores it
/// (zeros at `is_init`), and the post-step state.
struct Rollout {
    features: Vec<f32>,
    in_h: Vec<f32>,
    in_c: Vec<f32>,
    post_h: Vec<f32>,
    post_c: Vec<f32>,
}

/// Steps a module one step at a time over every row (as an actor does) from `initial` state,
/// carrying `next` into the following step. Returns per step the features, the incoming state
/// as an actor stores it (zeros at `is_init`), and the post-step state.
fn rollout(
    case: &Case,
    core: &RecurrentCore<B>,
    obs: &[f32],
    initial: (Vec<f32>, Vec<f32>),
) -> Rollout {
    let (b, t, l, h, i) = (case.rows, case.steps, case.layers, case.hidden, case.input);
    let device = cpu_device();
    let lh = l * h;
    let (mut feats, mut in_h, mut in_c, mut post_h, mut post_c) = (
        vec![0.0; b * t * h],
        vec![0.0; b * t * lh],
        vec![0.0; b * t * lh],
        vec![0.0; b * t * lh],
        vec![0.0; b * t * lh],
    );
    let mut state = RecurrentState {
        rs_h: t3(initial.0, [b, l, h]),
        rs_c: case.has_c().then(|| t3(initial.1, [b, l, h])),
    };
    for step in 0..t {
        let x: Vec<f32> = (0..b)
            .flat_map(|r| obs[(r * t + step) * i..(r * t + step + 1) * i].to_vec())
            .collect();
        let init: Vec<bool> = (0..b).map(|r| case.is_init[r * t + step]).collect();
        // What the actor stores: the state fed to the policy, zeroed by the primer at resets.
        let stored_h = out(state.rs_h.clone());
        let stored_c = state.rs_c.clone().map(out);
        for r in 0..b {
            let dst = (r * t + step) * lh;
            if !init[r] {
                in_h[dst..dst + lh].copy_from_slice(&stored_h[r * lh..(r + 1) * lh]);
                if let Some(c) = &stored_c {
                    in_c[dst..dst + lh].copy_from_slice(&c[r * lh..(r + 1) * lh]);
                }
            }
        }
        let is_init = Tensor::<B, 1, Bool>::from_data(TensorData::new(init, [b]), &device);
        let result = core
            .forward(
                Tensor::from_data(TensorData::new(x, [b, i]), &device),
                is_init,
                state,
            )
            .unwrap();
        let (f, nh, nc) = (
            out(result.features),
            out(result.next.rs_h.clone()),
            result.next.rs_c.clone().map(out),
        );
        for r in 0..b {
            feats[(r * t + step) * h..(r * t + step + 1) * h]
                .copy_from_slice(&f[r * h..(r + 1) * h]);
            let dst = (r * t + step) * lh;
            post_h[dst..dst + lh].copy_from_slice(&nh[r * lh..(r + 1) * lh]);
            if let Some(c) = &nc {
                post_c[dst..dst + lh].copy_from_slice(&c[r * lh..(r + 1) * lh]);
            }
        }
        state = result.next;
    }
    Rollout {
        features: feats,
        in_h,
        in_c,
        post_h,
        post_c,
    }
}

/// `next_*` in recurrent mode: the post-step state at segment ends, zero elsewhere.
fn at_segment_ends(case: &Case, is_init: &[bool], post: &[f32]) -> Vec<f32> {
    let (t, lh) = (case.steps, case.layers * case.hidden);
    let mut out = vec![0.0; post.len()];
    for p in 0..case.rows * t {
        if (p + 1) % t == 0 || is_init[p + 1] {
            out[p * lh..(p + 1) * lh].copy_from_slice(&post[p * lh..(p + 1) * lh]);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// An actor's rollout replayed in recurrent mode, with the states the actor stored, gives
    /// the actor's numbers; so does a slice that starts mid-episode (step k > 0, no is_init
    /// there) from the state stored at its first step.
    #[test]
    fn sequential_rollout_equals_recurrent_mode(case in case(), backend in variant(), cut in 0usize..8) {
        let core = case.module(backend);
        let obs = case.obs();
        let lh = case.layers * case.hidden;
        let initial = (case.random(7, case.rows * lh), case.random(8, case.rows * lh));
        let Rollout { features: feats, in_h, in_c, post_h, post_c } = rollout(&case, &core, &obs, initial);

        let weights = vec![1.0; case.rows * case.steps * case.hidden];
        let run = run_recurrent(&case, &core, obs.clone(), case.is_init.clone(), in_h.clone(), in_c.clone(), weights);
        assert_close("features", &run.features, &feats, 1e-5, 0.0);
        assert_close("next_rs_h", &run.next_h, &at_segment_ends(&case, &case.is_init, &post_h), 1e-5, 0.0);
        if let Some(c) = &run.next_c {
            assert_close("next_rs_c", c, &at_segment_ends(&case, &case.is_init, &post_c), 1e-5, 0.0);
        }

        // A slice [k, T) of every row: is_init at k taken from the rollout (false unless the
        // episode really starts there); it starts from the stored state at k all the same.
        let k = cut % case.steps;
        let (b, t, h, i) = (case.rows, case.steps, case.hidden, case.input);
        let sub = Case { steps: t - k, is_init: (0..b).flat_map(|r| case.is_init[r * t + k..(r + 1) * t].to_vec()).collect(), ..case.clone() };
        let pick = |v: &[f32], w: usize| -> Vec<f32> { (0..b).flat_map(|r| v[(r * t + k) * w..(r + 1) * t * w].to_vec()).collect() };
        let run = run_recurrent(&sub, &core, pick(&obs, i), sub.is_init.clone(), pick(&in_h, lh), pick(&in_c, lh), vec![1.0; b * (t - k) * h]);
        // The first step of the slice reads the stored (carried) state even where is_init is
        // false, exactly like the actor did.
        let mut forced = sub.is_init.clone();
        for r in 0..b { forced[r * (t - k)] = true; }
        assert_close("slice features", &run.features, &pick(&feats, h), 1e-5, 0.0);
        assert_close("slice next_rs_h", &run.next_h, &at_segment_ends(&sub, &forced, &pick(&post_h, lh)), 1e-5, 0.0);
    }

    /// `pad`, `fused` and `fused` with `recompute = "full"` agree with `scan` on outputs and on
    /// every gradient; the loss also weighs the `next` state (so its gradients are checked too).
    #[test]
    fn pad_fused_and_scan_agree(case in case()) {
        let weights = case.random(3, case.rows * case.steps * case.hidden);
        let next_weights = case.random(6, case.rows * case.steps * case.layers * case.hidden);
        let go = |variant| {
            let core = case.module(variant);
            run_recurrent_with(&case, &core, case.obs(), case.is_init.clone(), (case.stored(4), case.stored(5)), weights.clone(), Some(next_weights.clone()))
        };
        let s = go(SCAN);
        for variant in [PAD, FUSED, FUSED_FULL] {
            let p = go(variant);
            let what = |x: &str| format!("{}/{:?}: {x}", variant.0.name(), variant.1);
            assert_close(&what("features"), &p.features, &s.features, 1e-5, 0.0);
            assert_close(&what("next_rs_h"), &p.next_h, &s.next_h, 1e-5, 0.0);
            if let (Some(pc), Some(sc)) = (&p.next_c, &s.next_c) {
                assert_close(&what("next_rs_c"), pc, sc, 1e-5, 0.0);
            }
            prop_assert_eq!(p.grads.len(), s.grads.len());
            for ((name, pg), (sname, sg)) in p.grads.iter().zip(&s.grads) {
                prop_assert_eq!(name, sname);
                assert_close(&what(&format!("grad.{name}")), pg, sg, 1e-5, 1e-4);
            }
        }
    }

    /// Changing the inputs before an `is_init` of one row, and the stored states at every
    /// non-start step, leaves every output from that `is_init` on bit-identical; the gradient
    /// of the outputs after the boundary w.r.t. anything before it is exactly zero.
    #[test]
    fn nothing_crosses_an_is_init_boundary(case in case(), backend in variant(), row_pick in any::<usize>(), at in any::<usize>()) {
        prop_assume!(case.steps >= 2);
        let core = case.module(backend);
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
            let start = p % t == 0 || is_init[p];
            if !start {
                for x in &mut sh2[p * lh..(p + 1) * lh] { *x += 7.0; }
                for x in &mut sc2[p * lh..(p + 1) * lh] { *x -= 5.0; }
            }
        }
        // The loss weighs only the outputs of `row` from k on.
        let mut weights = vec![0.0; b * t * h];
        for x in &mut weights[(row * t + k) * h..(row + 1) * t * h] { *x = 1.0; }

        let a = run_recurrent(&case, &core, obs, is_init.clone(), sh, sc, weights.clone());
        let z = run_recurrent(&case, &core, obs2, is_init, sh2, sc2, weights);
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
    }
}

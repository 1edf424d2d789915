//! The actor's contract: init tracking and priming are automatic, the state is carried
//! exactly, and replaying its chunks in recurrent mode reproduces what it computed.

#![forbid(unsafe_code)]

use actor::check::Checker;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use common::backend::{cpu_device, Cpu};
use common::chunk::{ActionColumn, Chunk};
use common::policy::dist::{categorical_log_prob, squashed_gaussian_log_prob_tensor};
use common::policy::inference::{InferencePolicy, StepOutput};
use common::policy::init_policy;
use common::policy::{policy_config_for, ActionSpec};
use common::rollout::{Actor, ActorConfig};
use recur_rnn::{CellKind, RecurrentState};

fn actor(env: &str, cell: CellKind, envs: usize, steps: usize, seed: u64) -> Actor {
    let config = policy_config_for(env)
        .unwrap()
        .with_cell(cell)
        .with_hidden_size(16);
    let policy = init_policy(&config, seed).unwrap();
    let config = ActorConfig {
        actor_id: 3,
        incarnation: 1,
        ..ActorConfig::new(env, envs, steps, seed)
    };
    Actor::new(config, policy).unwrap()
}

const CASES: [(&str, CellKind); 6] = [
    ("CartPole-v1", CellKind::Lstm),
    ("MaskedCartPole-v1", CellKind::Gru),
    ("Pendulum-v1", CellKind::Lstm),
    ("RepeatPrevious-v0", CellKind::Gru),
    ("MaskedCartPole-v1", CellKind::MinGru),
    ("Pendulum-v1", CellKind::MinGru),
];

#[test]
fn every_field_passes_the_spec_check_across_chunks() {
    for (env, cell) in CASES {
        let mut a = actor(env, cell, 5, 40, 11);
        let mut checker = Checker::new(&a);
        let mut dones = 0;
        for _ in 0..8 {
            let chunk = a.collect().unwrap();
            dones += chunk.next_done.iter().filter(|&&d| d == 1).count();
            checker.check(&a, &chunk).unwrap_or_else(|e| panic!("{e}"));
        }
        if env != "Pendulum-v1" {
            // Resets inside chunks were exercised (Pendulum's 200-step limit ends at 320).
            assert!(dones > 5, "{env}: only {dones} episodes ended");
        }
    }
}

/// Each kind of corruption is caught and named.
#[test]
fn the_checker_names_the_field_that_breaks_its_spec() {
    let mut a = actor("CartPole-v1", CellKind::Lstm, 3, 30, 5);
    let good = a.collect().unwrap();
    let check = |mutate: &dyn Fn(&mut Chunk)| {
        let mut c = good.clone();
        mutate(&mut c);
        Checker::new(&a).check(&a, &c).unwrap_err()
    };
    let lh = 16;
    let err = check(&|c| c.is_init[0] = 0);
    assert_eq!(err.field, "is_init");
    let err = check(&|c| c.rs_h[3] = 0.5); // step 0 of env 0 is an episode start
    assert_eq!(err.field, "rs_h");
    assert!(err.expected.contains("zeros"), "{err}");
    let err = check(&|c| c.rs_h[lh + 2] += 0.25); // step 1 must carry step 0's next state
    assert_eq!((err.field.as_str(), err.step), ("rs_h", 1));
    let err = check(&|c| {
        if let ActionColumn::Discrete(a) = &mut c.action {
            a[4] = 2
        }
    });
    assert_eq!((err.field.as_str(), err.observed.as_str()), ("action", "2"));
    let err = check(&|c| c.observation[0] = 9.0); // |x| > 4.8
    assert_eq!(err.field, "observation");
    let err = check(&|c| c.next_done[7] = 1 - c.next_done[7]);
    assert_eq!(err.field, "next.done");
    let err = check(&|c| c.traj_ids[5] += 1);
    assert_eq!(err.field, "collector.traj_ids");
    let err = check(&|c| c.state_value[2] = f32::INFINITY);
    assert!(err.observed.contains("state_value"), "{err}");
}

/// Replaying chunks through the same network in recurrent mode ([E, T] from the stored
/// states; later chunks start mid-episode) reproduces the actor's log-probs, values and
/// features: the sequential/recurrent equivalence end to end.
#[test]
fn recurrent_replay_reproduces_what_the_actor_computed() {
    for (env, cell) in CASES {
        let mut a = actor(env, cell, 4, 25, 21);
        let s = a.schema().clone();
        let (e, t, d, l, h) = (s.envs, s.steps, s.obs_dim, s.num_layers, s.hidden_size);
        let device = cpu_device();
        for _ in 0..3 {
            let chunk = a.collect().unwrap();
            let policy = a.policy();
            // Sequential reference: every (env, t) as one step from its stored state; the
            // chunk's carry is checked by the spec check, so these are the actor's features.
            let sequential_features = {
                let n = e * t;
                let out = policy
                    .forward(
                        Tensor::from_data(
                            TensorData::new(chunk.observation.clone(), [n, d]),
                            &device,
                        ),
                        None,
                        Tensor::<Cpu, 1, Bool>::from_data(
                            TensorData::new(
                                chunk.is_init.iter().map(|&x| x == 1).collect::<Vec<_>>(),
                                [n],
                            ),
                            &device,
                        ),
                        RecurrentState {
                            rs_h: Tensor::from_data(
                                TensorData::new(chunk.rs_h.clone(), [n, l, h]),
                                &device,
                            ),
                            rs_c: chunk
                                .rs_c
                                .clone()
                                .map(|c| Tensor::from_data(TensorData::new(c, [n, l, h]), &device)),
                        },
                    )
                    .unwrap();
                out.features.into_data().to_vec::<f32>().unwrap()
            };
            let out = policy.forward_chunk(&chunk, &s).unwrap();
            let close = |what: &str, got: &[f32], want: &[f32]| {
                assert_eq!(got.len(), want.len());
                let (i, worst) = got
                    .iter()
                    .zip(want)
                    .map(|(g, w)| (g - w).abs())
                    .enumerate()
                    .fold((0, 0.0f32), |m, (i, d)| if d > m.1 { (i, d) } else { m });
                assert!(
                    worst <= 1e-5,
                    "{env}/{cell:?}: {what}[{i}] = {} vs the actor's {}: differs by {worst}",
                    got[i],
                    want[i]
                );
            };
            close(
                "features",
                &out.features.into_data().to_vec::<f32>().unwrap(),
                &sequential_features,
            );
            close(
                "state_value",
                &out.value.clone().into_data().to_vec::<f32>().unwrap(),
                &chunk.state_value,
            );
            let log_prob = match (&chunk.action, policy.action()) {
                (ActionColumn::Discrete(acts), ActionSpec::Discrete { .. }) => {
                    let idx = Tensor::<Cpu, 3, Int>::from_data(
                        TensorData::new(acts.clone(), [e, t, 1]),
                        &device,
                    );
                    categorical_log_prob(out.head, idx)
                }
                (ActionColumn::Continuous(acts), ActionSpec::Continuous { low, high }) => {
                    let at = Tensor::<Cpu, 3>::from_data(
                        TensorData::new(acts.clone(), [e, t, low.len()]),
                        &device,
                    );
                    squashed_gaussian_log_prob_tensor(out.head, at, low, high)
                }
                _ => unreachable!(),
            };
            close(
                "sample_log_prob",
                &log_prob.into_data().to_vec::<f32>().unwrap(),
                &chunk.sample_log_prob,
            );
        }
    }
}

/// Within an episode the stored state at step t is exactly ("next", state) of step t - 1,
/// across chunk boundaries too; at every is_init the policy saw exactly zeros. The actor's
/// calls are replayed with the same code and batch (one call of E rows per step), so the
/// comparison is bit for bit.
#[test]
fn the_state_is_carried_and_zeroed_exactly_at_resets() {
    let (e, t, lh, d) = (6, 20, 16, 2);
    let mut a = actor("MaskedCartPole-v1", CellKind::Lstm, e, t, 9);
    let mut replay = InferencePolicy::from_policy(a.policy());
    let mut carried: Option<(Vec<f32>, Vec<f32>)> = None;
    let mut resets_seen = 0;
    for _ in 0..6 {
        let chunk = a.collect().unwrap();
        let rs_c = chunk.rs_c.as_ref().unwrap();
        let rows = |v: &[f32], step: usize, w: usize| -> Vec<f32> {
            (0..e)
                .flat_map(|env| v[(env * t + step) * w..(env * t + step + 1) * w].to_vec())
                .collect()
        };
        for step in 0..t {
            let (h, c) = (rows(&chunk.rs_h, step, lh), rows(rs_c, step, lh));
            let init: Vec<bool> = (0..e)
                .map(|env| chunk.is_init[env * t + step] == 1)
                .collect();
            for env in 0..e {
                let (he, ce) = (&h[env * lh..(env + 1) * lh], &c[env * lh..(env + 1) * lh]);
                if init[env] {
                    resets_seen += 1;
                    assert!(
                        he.iter().chain(ce).all(|&x| x == 0.0),
                        "non-zero state at an is_init step"
                    );
                } else {
                    let (ph, pc) = carried.as_ref().expect("a previous step");
                    assert_eq!(
                        he,
                        &ph[env * lh..(env + 1) * lh],
                        "rs_h of env {env} at step {step} is not the carried state"
                    );
                    assert_eq!(ce, &pc[env * lh..(env + 1) * lh]);
                }
            }
            let mut out = StepOutput::default();
            replay.step(
                &rows(&chunk.observation, step, d),
                &[],
                &init,
                &h,
                Some(&c),
                &mut out,
            );
            carried = Some((out.next_h, out.next_c));
        }
    }
    assert!(
        resets_seen > e,
        "episodes restarted inside the rollout ({resets_seen} is_init steps)"
    );
}

#[test]
fn collection_is_deterministic_for_a_seed() {
    let run = |seed| {
        let mut a = actor("CartPole-v1", CellKind::Gru, 3, 16, seed);
        (0..3).map(|_| a.collect().unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(run(4), run(4));
    assert_ne!(run(4), run(5));
}

#[test]
fn a_policy_that_does_not_fit_the_env_is_refused() {
    let config = policy_config_for("CartPole-v1").unwrap();
    let policy = init_policy(&config, 0).unwrap();
    let err = Actor::new(ActorConfig::new("Pendulum-v1", 2, 4, 0), policy)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("Pendulum-v1") && err.contains("obs_dim = 4"),
        "{err}"
    );
}

#[test]
fn a_restored_actor_continues_exactly_where_the_saved_one_stood() {
    for (env, cell) in CASES {
        let mut a = actor(env, cell, 3, 40, 4);
        for _ in 0..3 {
            a.collect().unwrap();
        }
        let saved = a.save_state().expect("built-in envs are saved");
        // Another seed and incarnation, the same weights: only the restored state can make its
        // chunks equal.
        let mut config = a.config().clone();
        config.seed = 99;
        config.incarnation = 2;
        let mut b = Actor::new(config, a.policy().clone()).unwrap();
        b.collect().unwrap();
        assert_eq!(b.restore(&saved).unwrap(), a.policy_version());
        for k in 0..4 {
            let (x, mut y) = (a.collect().unwrap(), b.collect().unwrap());
            assert_eq!((y.meta.incarnation, y.meta.seq), (2, x.meta.seq - 2));
            (y.meta.incarnation, y.meta.seq) = (x.meta.incarnation, x.meta.seq);
            // The episodes running at the save keep their trajectory ids; the ones that start
            // later are the new incarnation's.
            if k == 0 {
                assert_eq!(x.traj_ids[0], y.traj_ids[0], "{env}");
            }
            let incarnation_bits = 0xffi64 << 44;
            for (&i, &j) in x.traj_ids.iter().zip(&y.traj_ids) {
                assert_eq!(i & !incarnation_bits, j & !incarnation_bits, "{env}");
            }
            y.traj_ids.clone_from(&x.traj_ids);
            assert!(x == y, "{env}: chunk {k} after the restore differs");
        }
        // A state for another schema is refused, naming it.
        let mut c = actor(env, cell, 2, 40, 4);
        let err = c.restore(&saved).unwrap_err().to_string();
        assert!(
            err.contains("saved actor state") && err.contains("schema"),
            "{err}"
        );
    }
}

//! The fused update against burn's path, which is the reference: the same loss and gradients
//! on the same minibatch, the same weights after several updates, and checkpoints that resume
//! bit-exactly on the fused path and carry Adam's state across paths.

use burn::module::{AutodiffModule, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use common::backend::{cpu_device, to_vec as host, CpuAutodiff};
use common::checkpoint::Checkpointed;
use common::chunk::Chunk;
use common::policy::{chunk_schema, init_policy, policy_config_for, PolicyConfig};
use common::rollout::{Actor, ActorConfig};
use recur_rnn::CellKind;

use super::layout::Layout;
use super::FlatUpdate;
use crate::algo::ppo::{autodiff, Ppo};
use crate::algo::Algorithm;
use crate::config::{PpoSection, UpdatePath};

pub(super) const ENVS: usize = 6;
pub(super) const STEPS: usize = 16;

fn ppo_config(update: UpdatePath) -> PpoSection {
    toml::from_str::<PpoSection>(&format!(
        "frames_per_update = {}\nepochs = 2\nslice_len = 8\nnum_slices = 6\nlr = 3e-3\n\
         gamma = 0.99\ngae_lambda = 0.9\nclip_eps = 0.2\nvalue_coef = 0.5\n\
         entropy_coef = 0.01\nmax_grad_norm = 0.5\nupdate = \"{}\"",
        ENVS * STEPS,
        update.name()
    ))
    .unwrap()
}

/// Chunks of an actor running `pc`'s initial policy (seed 3) on `env`.
pub(super) fn chunks(env: &str, pc: &PolicyConfig, n: usize) -> Vec<Chunk> {
    let config = ActorConfig::new(env, ENVS, STEPS, 11);
    let mut actor = Actor::new(config, init_policy(pc, 3).unwrap()).unwrap();
    (0..n).map(|_| actor.collect().unwrap()).collect()
}

pub(super) fn ppo(pc: &PolicyConfig, update: UpdatePath) -> Ppo<CpuAutodiff> {
    let schema = chunk_schema(pc, ENVS, STEPS);
    let ppo = Ppo::new(pc, &ppo_config(update), &schema, 3, &cpu_device()).unwrap();
    assert_eq!(ppo.path.name(), update.name());
    ppo
}

/// `|a - b| <= tol * max(1, |b|)` everywhere, or a message naming the worst element.
pub(super) fn close(what: &str, a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let worst = a
        .iter()
        .zip(b)
        .enumerate()
        .map(|(i, (x, y))| (i, (x - y).abs() / y.abs().max(1.0)))
        .fold((0, 0.0f32), |w, e| if e.1 > w.1 { e } else { w });
    assert!(
        worst.1 <= tol && a.iter().all(|x| x.is_finite()),
        "{what}: element {} differs by {} (fused {}, burn {})",
        worst.0,
        worst.1,
        a[worst.0],
        b[worst.0]
    );
}

/// burn's gradients of `loss` for `layout`'s parameters, flat.
fn burn_grads(loss: Tensor<CpuAutodiff, 1>, ppo: &Ppo<CpuAutodiff>, layout: &Layout) -> Vec<f32> {
    let grads = GradientsParams::from_grads(loss.backward(), ppo.model());
    let mut flat = vec![0.0f32; layout.total];
    struct Get<'a> {
        grads: &'a GradientsParams,
        layout: &'a Layout,
        flat: &'a mut [f32],
    }
    impl burn::module::ModuleVisitor<CpuAutodiff> for Get<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<CpuAutodiff, D>>) {
            let Some(slot) = self.layout.slots().into_iter().find(|s| s.id == p.id) else {
                return;
            };
            let g = self
                .grads
                .get::<<CpuAutodiff as burn::tensor::backend::AutodiffBackend>::InnerBackend, D>(
                    p.id,
                )
                .expect("every trained parameter has a gradient");
            self.flat[slot.range()].copy_from_slice(&host(g));
        }
    }
    burn::module::Module::visit(
        ppo.model(),
        &mut Get {
            grads: &grads,
            layout,
            flat: &mut flat,
        },
    );
    flat
}

pub(super) fn loss_and_gradients_match(env: &str, pc: PolicyConfig) {
    let data = chunks(env, &pc, 1);
    loss_and_gradients_match_on(&pc, &data[0]);
}

pub(super) fn loss_and_gradients_match_on(pc: &PolicyConfig, chunk: &Chunk) {
    let pc = pc.clone();
    let data = [chunk.clone()];
    let (mut burn, mut fused) = (ppo(&pc, UpdatePath::Burn), ppo(&pc, UpdatePath::Fused));
    for p in [&mut burn, &mut fused] {
        p.add_chunk(&data[0]);
    }
    let (bb, fb) = (burn.next_batch(), fused.next_batch());
    assert_eq!(bb.positions, fb.positions, "same sampler, same slices");
    let (loss, stats) = autodiff::loss(&burn.trainee, &burn.minibatch(&bb));
    let outcome = FlatUpdate::of(&fused.trainee).minibatch_loss(&fused.minibatch(&fb));
    let layout = Layout::of(fused.model());
    let scalars = |o: &[f32]| o.to_vec();
    close(
        "loss, policy loss, value loss, entropy, approx_kl, clip_frac",
        &scalars(&[
            outcome.stats.loss,
            outcome.stats.policy_loss,
            outcome.stats.value_loss,
            outcome.stats.entropy,
            outcome.stats.approx_kl,
            outcome.stats.clip_frac,
        ]),
        &[
            stats.loss,
            stats.policy_loss,
            stats.value_loss,
            stats.entropy,
            stats.approx_kl,
            stats.clip_frac,
        ],
        1e-5,
    );
    assert!(
        stats.loss.is_finite() && outcome.grads.iter().all(|g| g.is_finite()),
        "a finite loss and gradients"
    );
    let reference = burn_grads(loss, &burn, &Layout::of(burn.model()));
    assert!(
        reference.iter().any(|&g| g.abs() > 1e-4),
        "the batch must produce gradients to compare"
    );
    for slot in layout.slots() {
        close(
            &format!("gradient of {:?} {:?}", slot.id, slot.shape),
            &outcome.grads[slot.range()],
            &reference[slot.range()],
            1e-5,
        );
    }
}

fn masked(cell: CellKind, layers: usize, encoder: Vec<usize>) -> PolicyConfig {
    policy_config_for("MaskedCartPole-v1")
        .unwrap()
        .with_cell(cell)
        .with_hidden_size(16)
        .with_num_layers(layers)
        .with_encoder(encoder)
        .with_obs_norm(true)
}

#[test]
fn lstm_loss_and_gradients_match_burns() {
    loss_and_gradients_match("MaskedCartPole-v1", masked(CellKind::Lstm, 1, vec![16]));
}

#[test]
fn gru_two_layers_two_encoder_layers_match_burns() {
    loss_and_gradients_match("MaskedCartPole-v1", masked(CellKind::Gru, 2, vec![12, 16]));
}

#[test]
fn lstm_without_encoder_matches_burns() {
    loss_and_gradients_match("MaskedCartPole-v1", masked(CellKind::Lstm, 2, vec![]));
}

#[test]
fn a_runaway_log_ratio_is_clamped_alike_in_both_paths() {
    // Stored log-probabilities 200 nats off (exp overflows f32) on every fifth step, both
    // ways: each path clamps the log-ratio and passes no gradient through those steps, so the
    // loss and gradients stay finite and the paths agree. Without the clamp the loss is inf.
    let pc = masked(CellKind::Lstm, 1, vec![16]);
    let mut chunk = chunks("MaskedCartPole-v1", &pc, 1).remove(0);
    for (i, lp) in chunk.sample_log_prob.iter_mut().enumerate() {
        if i % 5 == 0 {
            *lp += if i % 10 == 0 { 200.0 } else { -200.0 };
        }
    }
    loss_and_gradients_match_on(&pc, &chunk);
}

#[test]
fn multi_discrete_actions_match_burns() {
    let env = "popgym-BattleshipEasy-v0";
    let pc = policy_config_for(env)
        .unwrap()
        .with_hidden_size(16)
        .with_encoder(vec![16]);
    assert!(matches!(
        pc.action,
        common::policy::ActionSpec::MultiDiscrete { .. }
    ));
    loss_and_gradients_match(env, pc);
}

/// Every trained parameter of `ppo`'s model, flat.
pub(super) fn weights(ppo: &Ppo<CpuAutodiff>) -> Vec<f32> {
    Layout::of(ppo.model()).read(ppo.model())
}

#[test]
fn weights_after_several_updates_match_burns() {
    let pc = masked(CellKind::Lstm, 1, vec![16]);
    let data = chunks("MaskedCartPole-v1", &pc, 4);
    let (mut burn, mut fused) = (ppo(&pc, UpdatePath::Burn), ppo(&pc, UpdatePath::Fused));
    let start = weights(&burn);
    for chunk in &data {
        for p in [&mut burn, &mut fused] {
            p.add_chunk(chunk);
            p.update().unwrap();
        }
        close("weights", &weights(&fused), &weights(&burn), 1e-5);
    }
    let moved = start
        .iter()
        .zip(weights(&burn))
        .filter(|(a, b)| (*a - b).abs() > 1e-3)
        .count();
    assert!(
        moved > start.len() / 2,
        "the updates must move the weights: {moved}"
    );
    // The normalizer (not trained, set after each update) too.
    assert_eq!(
        host(fused.model().obs_norm.val()),
        host(burn.model().obs_norm.val())
    );
    assert_eq!(
        host(fused.model().valid().policy_head.weight.val()),
        weights(&fused)[Layout::of(fused.model()).policy_head.weight.range()].to_vec()
    );
}

#[test]
fn fused_checkpoints_resume_bit_exactly_and_carry_adam_across_paths() {
    let pc = masked(CellKind::Gru, 1, vec![16]);
    checkpoints_resume(&pc, chunks("MaskedCartPole-v1", &pc, 4));
}

pub(super) fn checkpoints_resume(pc: &PolicyConfig, data: Vec<Chunk>) {
    let pc = pc.clone();
    let mut fused = ppo(&pc, UpdatePath::Fused);
    let mut burn = ppo(&pc, UpdatePath::Burn);
    for chunk in &data[..2] {
        for p in [&mut fused, &mut burn] {
            p.add_chunk(chunk);
            p.update().unwrap();
        }
    }
    let (model, optim) = fused.save_state().unwrap();
    let host_state = fused.host_state();
    // Fused -> fused: bit-exact.
    let mut resumed = ppo(&pc, UpdatePath::Fused);
    resumed.load_state(model.clone(), optim.clone()).unwrap();
    resumed.load_host_state(&host_state).unwrap();
    // Fused checkpoint -> burn's path, and burn's checkpoint -> the fused path.
    let mut on_burn = ppo(&pc, UpdatePath::Burn);
    on_burn.load_state(model, optim).unwrap();
    on_burn.load_host_state(&host_state).unwrap();
    let (bm, bo) = burn.save_state().unwrap();
    let mut burn_to_fused = ppo(&pc, UpdatePath::Fused);
    burn_to_fused.load_state(bm, bo).unwrap();
    burn_to_fused.load_host_state(&burn.host_state()).unwrap();
    for chunk in &data[2..] {
        for p in [
            &mut fused,
            &mut resumed,
            &mut on_burn,
            &mut burn,
            &mut burn_to_fused,
        ] {
            p.add_chunk(chunk);
            p.update().unwrap();
        }
        close("fused resume", &weights(&resumed), &weights(&fused), 0.0);
        close(
            "fused checkpoint on burn's path",
            &weights(&on_burn),
            &weights(&fused),
            1e-5,
        );
        close(
            "burn checkpoint on the fused path",
            &weights(&burn_to_fused),
            &weights(&burn),
            1e-5,
        );
    }
}

#[test]
fn fused_refuses_what_it_cannot_run_and_auto_falls_back() {
    let pc = masked(CellKind::MinGru, 1, vec![16]);
    let schema = chunk_schema(&pc, ENVS, STEPS);
    let err = Ppo::<CpuAutodiff>::new(
        &pc,
        &ppo_config(UpdatePath::Fused),
        &schema,
        3,
        &cpu_device(),
    )
    .err()
    .expect("minGRU has no fused update");
    assert!(
        err.to_string().contains("policy.cell = \"mingru\""),
        "{err}"
    );
    let auto = Ppo::<CpuAutodiff>::new(
        &pc,
        &ppo_config(UpdatePath::Auto),
        &schema,
        3,
        &cpu_device(),
    )
    .unwrap();
    assert_eq!(auto.path.name(), "burn");
    let lstm = masked(CellKind::Lstm, 1, vec![16]);
    let schema = chunk_schema(&lstm, ENVS, STEPS);
    let auto = Ppo::<CpuAutodiff>::new(
        &lstm,
        &ppo_config(UpdatePath::Auto),
        &schema,
        3,
        &cpu_device(),
    )
    .unwrap();
    assert_eq!(
        auto.path.name(),
        "fused",
        "auto picks the fused update for a CPU LSTM policy"
    );
    let scan = lstm.with_backend(recur_rnn::RecurrentBackend::Scan);
    let err = Ppo::<CpuAutodiff>::new(
        &scan,
        &ppo_config(UpdatePath::Fused),
        &schema,
        3,
        &cpu_device(),
    )
    .err()
    .expect("scan is not fused");
    assert!(
        err.to_string().contains("policy.backend = \"scan\""),
        "{err}"
    );
}

#[test]
fn the_fused_critic_pass_matches_burns() {
    for pc in [
        masked(CellKind::Lstm, 2, vec![16]),
        masked(CellKind::Gru, 1, vec![]),
    ] {
        let data = chunks("MaskedCartPole-v1", &pc, 3);
        let (mut burn, mut fused) = (ppo(&pc, UpdatePath::Burn), ppo(&pc, UpdatePath::Fused));
        // After an update, so that the weights and the normalizer are not the initial ones.
        for p in [&mut burn, &mut fused] {
            p.add_chunk(&data[0]);
            p.update().unwrap();
        }
        for chunk in &data[1..] {
            let cut = (0..ENVS * STEPS)
                .filter(|&p| p % STEPS + 1 == STEPS)
                .count();
            let (bv, bn) = burn.critic_pass(chunk);
            let (fv, fnext) = fused.critic_pass(chunk);
            assert!(
                bn.iter().filter(|&&v| v != 0.0).count() >= cut / 2,
                "bootstraps"
            );
            close("values", &fv, &bv, 1e-5);
            close("bootstrap values", &fnext, &bn, 1e-5);
        }
    }
}

#[test]
fn row_blocks_add_up_to_the_whole_minibatch() {
    use super::net::{Batch, LossConfig};
    let pc = masked(CellKind::Lstm, 2, vec![16]);
    let fused = FlatUpdate::of(&ppo(&pc, UpdatePath::Fused).trainee);
    // A minibatch of 5 rows of 8 steps (3 blocks: 2, 2 and 1 rows), made up: resets inside
    // rows, both actions, padding at the end of the last row.
    let (rows, len, d, lh) = (5, 8, pc.obs_dim, 2 * 16);
    let n = rows * len;
    let mut seed = 7u32;
    let mut rand = move || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    let mut draw = |k: usize| (0..k).map(|_| rand()).collect::<Vec<f32>>();
    let (obs, rs_h, rs_c) = (draw(n * d), draw(n * lh), draw(n * lh));
    let (old_logp, target, adv) = (draw(n), draw(n), draw(n));
    let old_logp: Vec<f32> = old_logp.iter().map(|x| 0.5f32.ln() + 0.1 * x).collect();
    let action: Vec<f32> = (0..n).map(|p| (p * 7 % 3 == 0) as u8 as f32).collect();
    let start: Vec<bool> = (0..n).map(|p| p % len == 0 || p % 11 == 5).collect();
    let mask: Vec<bool> = (0..n).map(|p| p < n - 3).collect();
    let batch = Batch {
        rows,
        len,
        obs: &obs,
        images: &[],
        start: &start,
        rs_h: &rs_h,
        rs_c: Some(&rs_c),
        action: &action,
        old_logp: &old_logp,
        target: &target,
        adv: &adv,
        mask: &mask,
    };
    let cfg = LossConfig {
        clip_eps: 0.2,
        value_coef: 0.5,
        entropy_coef: 0.01,
    };
    let whole = fused.loss(&batch, cfg, Some(1));
    let split = fused.loss(&batch, cfg, Some(3));
    let stats = |o: &super::net::Outcome| {
        let s = &o.stats;
        [
            s.loss,
            s.policy_loss,
            s.value_loss,
            s.entropy,
            s.approx_kl,
            s.clip_frac,
        ]
    };
    close("statistics", &stats(&split), &stats(&whole), 1e-6);
    assert!(
        whole.grads.iter().any(|&g| g.abs() > 1e-4),
        "gradients to compare"
    );
    close("gradients", &split.grads, &whole.grads, 1e-6);
    // The critic's pass: each row's values and states do not depend on the other rows.
    let values = |blocks| fused.values(len, &obs, &[], &start, &rs_h, Some(&rs_c), Some(blocks));
    assert_eq!(values(3), values(1));
    // The layers' packs, shared by every call until the next step, change no bit against a
    // net whose calls pack their own.
    let unpacked = super::net::Net {
        packs: None,
        ..fused.net()
    };
    let count = mask.iter().filter(|&&m| m).count() as f32;
    assert_eq!(unpacked.ppo(&batch, cfg, count).grads, whole.grads);
    assert_eq!(
        unpacked.values(rows, len, &obs, &[], &start, &rs_h, Some(&rs_c)),
        values(1)
    );
}

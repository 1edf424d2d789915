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

const ENVS: usize = 6;
const STEPS: usize = 16;

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
fn chunks(env: &str, pc: &PolicyConfig, n: usize) -> Vec<Chunk> {
    let config = ActorConfig::new(env, ENVS, STEPS, 11);
    let mut actor = Actor::new(config, init_policy(pc, 3).unwrap()).unwrap();
    (0..n).map(|_| actor.collect().unwrap()).collect()
}

fn ppo(pc: &PolicyConfig, update: UpdatePath) -> Ppo<CpuAutodiff> {
    let schema = chunk_schema(pc, ENVS, STEPS);
    let ppo = Ppo::new(pc, &ppo_config(update), &schema, 3, &cpu_device()).unwrap();
    assert_eq!(ppo.path.name(), update.name());
    ppo
}

/// `|a - b| <= tol * max(1, |b|)` everywhere, or a message naming the worst element.
fn close(what: &str, a: &[f32], b: &[f32], tol: f32) {
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

fn loss_and_gradients_match(env: &str, pc: PolicyConfig) {
    let data = chunks(env, &pc, 1);
    loss_and_gradients_match_on(&pc, &data[0]);
}

fn loss_and_gradients_match_on(pc: &PolicyConfig, chunk: &Chunk) {
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
fn weights(ppo: &Ppo<CpuAutodiff>) -> Vec<f32> {
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

#[test]
fn image_policy_checkpoints_resume_bit_exactly_and_carry_adam_across_paths() {
    let pc = dict_policy();
    checkpoints_resume(&pc, made_up_chunks(&pc, 4));
}

fn checkpoints_resume(pc: &PolicyConfig, data: Vec<Chunk>) {
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

/// A small convolutional encoder (a strided conv with padding, a max-pool, a second conv).
fn small_cnn() -> recur_rnn::encoder::EncoderConfig {
    use recur_rnn::encoder::{EncoderConfig, EncoderLayer};
    EncoderConfig {
        layers: vec![
            EncoderLayer::conv(4, 8, 4, 1),
            EncoderLayer::Maxpool { kernel: 2 },
            EncoderLayer::conv(6, 3, 1, 0),
        ],
        scale: 1.0 / 255.0,
        features: 12,
    }
}

fn pixel_policy(cell: CellKind) -> PolicyConfig {
    policy_config_for("PixelCartPole-v1")
        .unwrap()
        .with_cell(cell)
        .with_hidden_size(16)
        .with_cnn(Some(small_cnn()))
}

/// A Dict observation: 3 values (through an MLP) and two images, made-up steps (an env of
/// this shape needs Python): the concatenation's order and every part's gradient.
fn dict_policy() -> PolicyConfig {
    use common::envs::ImagePart;
    let part = |key: &str, shape| ImagePart {
        key: key.into(),
        shape,
    };
    PolicyConfig::new(3, common::policy::ActionSpec::Discrete { n: 3 })
        .with_images(vec![part("a", [9, 9, 2]), part("b", [12, 10, 1])])
        .with_cnn(Some(recur_rnn::encoder::EncoderConfig {
            layers: vec![recur_rnn::encoder::EncoderLayer::conv(5, 3, 2, 1)],
            scale: 1.0 / 255.0,
            features: 7,
        }))
        .with_hidden_size(16)
        .with_encoder(vec![8])
        .with_obs_norm(true)
}

/// Made-up chunks of `pc`'s layout: random values, pixels and actions, an episode ending now
/// and then, old log-probabilities near the uniform policy's.
fn made_up_chunks(pc: &PolicyConfig, n: usize) -> Vec<Chunk> {
    use common::chunk::{ActionColumn, ChunkMeta};
    let schema = chunk_schema(pc, ENVS, STEPS);
    let mut seed = 11u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as u32
    };
    (0..n)
        .map(|c| {
            let mut k = Chunk::zeros(&schema, ChunkMeta::new(0, 0, c as u64, 0));
            let f = schema.frames();
            let unit = |next: &mut dyn FnMut() -> u32| (next() % 2000) as f32 / 1000.0 - 1.0;
            let mut unit = || unit(&mut next);
            k.observation.iter_mut().for_each(|v| *v = unit());
            k.next_observation.iter_mut().for_each(|v| *v = unit());
            k.rs_h.iter_mut().for_each(|v| *v = 0.5 * unit());
            if let Some(rc) = &mut k.rs_c {
                rc.iter_mut().for_each(|v| *v = 0.5 * unit());
            }
            for p in 0..f {
                k.next_reward[p] = unit();
                k.state_value[p] = unit();
                k.sample_log_prob[p] = (1.0f32 / 3.0).ln() + 0.1 * unit();
                let (env, t) = (p / STEPS, p % STEPS);
                let done = (unit() > 0.7) as u8;
                k.next_done[p] = done;
                k.next_terminated[p] = done;
                k.is_init[p] = (t == 0 && c == 0 || t > 0 && k.next_done[p - 1] == 1) as u8;
                k.traj_ids[p] = (env * 1000 + c * 10) as i64;
            }
            k.pixels
                .iter_mut()
                .for_each(|v| *v = (unit() * 127.0 + 128.0) as u8);
            k.next_pixels
                .iter_mut()
                .for_each(|v| *v = (unit() * 127.0 + 128.0) as u8);
            if let ActionColumn::Discrete(a) = &mut k.action {
                a.iter_mut()
                    .for_each(|v| *v = ((unit() + 1.0) * 1.499) as i64);
            }
            k
        })
        .collect()
}

#[test]
fn image_policy_loss_and_gradients_match_burns() {
    for cell in [CellKind::Lstm, CellKind::Gru] {
        loss_and_gradients_match("PixelCartPole-v1", pixel_policy(cell));
    }
}

#[test]
fn dict_policy_loss_and_gradients_match_burns() {
    let pc = dict_policy();
    let data = made_up_chunks(&pc, 1);
    loss_and_gradients_match_on(&pc, &data[0]);
}

#[test]
fn image_policies_train_and_criticize_as_burn_does() {
    for (pc, data) in [
        (pixel_policy(CellKind::Lstm), None),
        (dict_policy(), Some(made_up_chunks(&dict_policy(), 3))),
    ] {
        let data = data.unwrap_or_else(|| chunks("PixelCartPole-v1", &pc, 3));
        let (mut burn, mut fused) = (ppo(&pc, UpdatePath::Burn), ppo(&pc, UpdatePath::Fused));
        let start = weights(&burn);
        for chunk in &data[..2] {
            for p in [&mut burn, &mut fused] {
                p.add_chunk(chunk);
                p.update().unwrap();
            }
            close("weights", &weights(&fused), &weights(&burn), 1e-5);
        }
        let layout = Layout::of(fused.model());
        let conv = &layout.cnn[0].params[0].1;
        let moved = (start[conv.range()]
            .iter()
            .zip(&weights(&fused)[conv.range()]))
        .filter(|(a, b)| (*a - *b).abs() > 1e-6)
        .count();
        assert!(
            moved > conv.range().len() / 2,
            "the first conv trains: {moved}"
        );
        let (bv, bn) = burn.critic_pass(&data[2]);
        let (fv, fnext) = fused.critic_pass(&data[2]);
        close("values", &fv, &bv, 1e-5);
        close("bootstrap values", &fnext, &bn, 1e-5);
    }
}

/// `policy.memory = false`: the fused update and critic match burn's, and the core's output at
/// a step depends on that step alone (a different stored state or history changes nothing).
#[test]
fn a_policy_without_memory_matches_burns_and_forgets() {
    let pc = pixel_policy(CellKind::Lstm).with_memory(false);
    loss_and_gradients_match("PixelCartPole-v1", pc.clone());
    let data = chunks("PixelCartPole-v1", &pc, 2);
    let (mut burn, mut fused) = (ppo(&pc, UpdatePath::Burn), ppo(&pc, UpdatePath::Fused));
    for p in [&mut burn, &mut fused] {
        p.add_chunk(&data[0]);
        p.update().unwrap();
    }
    let (bv, _) = burn.critic_pass(&data[1]);
    let (fv, _) = fused.critic_pass(&data[1]);
    close("values", &fv, &bv, 1e-5);
    // The same chunk with other stored states: the same values.
    let mut other = data[1].clone();
    other.rs_h.iter_mut().for_each(|v| *v += 0.5);
    assert_eq!(fused.critic_pass(&other).0, fv);
    // With memory, they differ.
    let remembering = ppo(&pc.clone().with_memory(true), UpdatePath::Fused);
    assert_ne!(
        remembering.critic_pass(&other).0,
        remembering.critic_pass(&data[1]).0
    );
}

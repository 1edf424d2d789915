//! The fused update with convolutional encoders against burn's path: a pixel policy
//! (PixelCartPole) and a Dict policy (values and two images, made-up steps), loss and every
//! gradient, weights after updates, the critic, checkpoints; and a policy without memory.

use common::checkpoint::Checkpointed;
use common::chunk::Chunk;
use common::policy::{chunk_schema, policy_config_for, PolicyConfig};
use recur_rnn::CellKind;

use super::layout::Layout;
use super::tests::{
    checkpoints_resume, chunks, close, loss_and_gradients_match, loss_and_gradients_match_on, ppo,
    weights, ENVS, STEPS,
};
use crate::algo::Algorithm;
use crate::config::UpdatePath;

#[test]
fn image_policy_checkpoints_resume_bit_exactly_and_carry_adam_across_paths() {
    let pc = dict_policy();
    checkpoints_resume(&pc, made_up_chunks(&pc, 4));
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
        onehot: None,
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
            onehot: None,
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

/// Slices that end at episode ends are padded (`ppo.pack_slices = false`, these tests'
/// setting); the fused update runs its encoders on the real steps alone (`RealSteps`), burn's
/// path on every position, and the loss and every gradient still agree. The check fails if a
/// real step's features land at another position or a padded step's gradient is kept.
#[test]
fn padded_minibatches_encode_only_their_real_steps() {
    let pc = pixel_policy(CellKind::Gru);
    let data = chunks("PixelCartPole-v1", &pc, 1);
    let mut fused = ppo(&pc, UpdatePath::Fused);
    fused.add_chunk(&data[0]);
    let batch = fused.next_batch();
    let mask = batch.mask.as_ref().expect("a padded batch");
    let real = super::RealSteps::of(mask);
    let keep = real.keep.as_ref().expect("padding to skip");
    assert_eq!(keep.len(), mask.iter().filter(|&&m| m).count());
    assert!(keep.len() < mask.len(), "the batch is padded");
    loss_and_gradients_match_on(&pc, &data[0]);
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

/// MiniGrid's image as one-hot codes (`onehot = [11, 6, 3]`) beside the one-hot direction:
/// the fused update's loss and every gradient (the first conv's over the planes included)
/// match burn's, and its weights after two updates.
#[test]
fn onehot_codes_match_burns() {
    use common::envs::ImagePart;
    let pc = PolicyConfig::new(4, common::policy::ActionSpec::Discrete { n: 3 })
        .with_images(vec![ImagePart {
            key: "image".into(),
            shape: [7, 7, 3],
        }])
        .with_cnn(Some(recur_rnn::encoder::EncoderConfig {
            onehot: Some(vec![11, 6, 3]),
            ..recur_rnn::encoder::EncoderConfig::minigrid()
        }))
        .with_hidden_size(16)
        .with_encoder(vec![8]);
    let mut data = made_up_chunks(&pc, 2);
    for chunk in &mut data {
        // Codes, some past their channel's range.
        for px in [&mut chunk.pixels, &mut chunk.next_pixels] {
            px.iter_mut().for_each(|v| *v %= 13);
        }
    }
    loss_and_gradients_match_on(&pc, &data[0]);
    let (mut burn, mut fused) = (ppo(&pc, UpdatePath::Burn), ppo(&pc, UpdatePath::Fused));
    for chunk in &data {
        for p in [&mut burn, &mut fused] {
            p.add_chunk(chunk);
            p.update().unwrap();
        }
        close("weights", &weights(&fused), &weights(&burn), 1e-5);
    }
}

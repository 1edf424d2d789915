//! Writes the fuzz targets' seed corpus (`fuzz/corpus/<target>/`) from real data: chunks an
//! actor collected, the frames both sides of the control socket and the actor port send, a
//! dataset's files, a run's checkpoint manifest and resume.bin, weight blobs, saved actor
//! states.
//!
//! ```text
//! cargo run -p recur-common --example fuzz_seeds -- fuzz/corpus RUN_DIR
//! ```
//!
//! `RUN_DIR` is a finished training run (its `checkpoint/` gives the manifest and resume.bin).

use std::path::{Path, PathBuf};

use common::chunk::ChunkSchema;
use common::control::{encode_frame, LearnerStats, Register, Request, Response};
use common::envs::Registry;
use common::policy::init_policy;
use common::policy::{chunk_schema, policy_config_for};
use common::remote::{data_head, message_frame, ActorMsg, LearnerMsg, KIND_CHUNK, KIND_WEIGHTS};
use common::rollout::{Actor, ActorConfig};
use common::weights::to_blob;
use recur_rnn::CellKind;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    anyhow::ensure!(args.len() == 2, "usage: fuzz_seeds OUT_DIR RUN_DIR");
    let (out, run) = (PathBuf::from(&args[0]), PathBuf::from(&args[1]));
    let mut n = 0;
    let mut put = |target: &str, name: &str, bytes: &[u8]| -> anyhow::Result<()> {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)?;
        n += 1;
        Ok(())
    };
    // A chunk with images (the `pixels` columns), alone and in a TCP frame.
    let images = common::fuzz::image_schema();
    let bytes = common::fuzz::sample_chunk(&images, 0).encode(&images)?;
    put("chunk", "images", &bytes)?;
    let mut frame = data_head(KIND_CHUNK, bytes.len()).to_vec();
    frame.extend_from_slice(&bytes);
    put("remote_frame", "chunk-images", &frame)?;
    for (env, cell, layers) in [
        ("MaskedCartPole-v1", CellKind::Lstm, 1),
        ("Pendulum-v1", CellKind::Gru, 2),
        ("RepeatPrevious-v0", CellKind::MinGru, 1),
    ] {
        let pc = policy_config_for(env)?
            .with_cell(cell)
            .with_hidden_size(8)
            .with_num_layers(layers)
            .with_encoder(vec![8]);
        let schema: ChunkSchema = chunk_schema(&pc, 2, 4);
        let policy = init_policy(&pc, 0)?;
        let config = ActorConfig::new(env, 2, 4, 7);
        let envs = Registry::builtin().make_vec(env, 2, 7)?;
        let mut actor = Actor::with_envs(config, policy.clone(), envs)?;
        let chunk = actor.collect()?;
        let bytes = chunk.encode(&schema)?;
        put("chunk", env, &bytes)?;
        let mut frame = data_head(KIND_CHUNK, bytes.len()).to_vec();
        frame.extend_from_slice(&bytes);
        put("remote_frame", &format!("chunk-{env}"), &frame)?;
        let blob = to_blob(&policy, 3);
        put("weights", env, &blob)?;
        let mut frame = data_head(KIND_WEIGHTS, blob.len()).to_vec();
        frame.extend_from_slice(&blob);
        put("remote_frame", &format!("weights-{env}"), &frame)?;
        if let Some(state) = actor.save_state() {
            put("actor_state", env, &state)?;
        }
        if env == "MaskedCartPole-v1" {
            let register = Request::Register(Register {
                actor_id: 1,
                incarnation: 2,
                pid: 1234,
                env: env.into(),
                observation_space: actor.observation_space().clone(),
                action_space: actor.action_space().clone(),
                schema: schema.clone(),
                state_bytes: 4096,
            });
            let requests = [
                register,
                Request::Heartbeat {
                    actor_id: 1,
                    incarnation: 2,
                    chunks_sent: 10,
                    full_waits: 1,
                    policy_version: 4,
                },
                Request::Stats,
                Request::Shutdown,
            ];
            for (i, r) in requests.iter().enumerate() {
                put("control_frame", &format!("request-{i}"), &encode_frame(r)?)?;
            }
            let responses = [
                Response::Registered {
                    ring: "recur-x-ring-1-2".into(),
                    weights: "recur-x-weights".into(),
                    sync: true,
                    restore: actor.save_state(),
                },
                Response::Refused {
                    reason: "env".into(),
                },
                Response::Ack { shutdown: false },
                Response::Stats(LearnerStats::default()),
            ];
            for (i, r) in responses.iter().enumerate() {
                put("control_frame", &format!("response-{i}"), &encode_frame(r)?)?;
            }
            let messages: Vec<Vec<u8>> = vec![
                message_frame(&ActorMsg::Hello {
                    token: [7; 32],
                    actor_id: 3,
                    resume: Some(1),
                    pid: 99,
                    host: "node-1".into(),
                })?,
                message_frame(&ActorMsg::Register {
                    env: env.into(),
                    observation_space: actor.observation_space().clone(),
                    action_space: actor.action_space().clone(),
                    schema: schema.clone(),
                })?,
                message_frame(&ActorMsg::Heartbeat {
                    chunks_sent: 3,
                    policy_version: 2,
                })?,
                message_frame(&LearnerMsg::Registered { next_seq: 5 })?,
                message_frame(&LearnerMsg::Ack {
                    received: Some(4),
                    shutdown: false,
                })?,
                message_frame(&LearnerMsg::Refused {
                    reason: "token".into(),
                })?,
            ];
            for (i, m) in messages.iter().enumerate() {
                put("remote_frame", &format!("message-{i}"), m)?;
            }
        }
    }
    for (i, (_, bytes)) in common::fuzz::dataset_files().iter().enumerate() {
        let mut seed = vec![i as u8];
        seed.extend_from_slice(bytes);
        put("dataset", &format!("file-{i}"), &seed)?;
    }
    let checkpoint = run.join("checkpoint");
    for (pick, file) in [(0u8, "manifest.json"), (1, "resume.bin")] {
        let mut seed = vec![pick];
        seed.extend_from_slice(&read(&checkpoint.join(file))?);
        put("checkpoint", file, &seed)?;
    }
    println!("wrote {n} seeds under {}", out.display());
    Ok(())
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

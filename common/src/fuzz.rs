//! The fuzz targets' entry points (`fuzz/`, `scripts/fuzz.sh`): every decoder that takes bytes
//! from disk or the network, fed arbitrary bytes. Each must answer with an error, never panic,
//! hang or allocate beyond its input's limits. The same functions replay the committed corpus
//! and every crash found as a regression test (`common/tests/fuzz_corpus.rs`), so CI checks
//! them without a nightly toolchain.
//!
//! | target | decoder | bytes from |
//! | --- | --- | --- |
//! | `chunk` | [`Chunk::decode`], [`Chunk::peek_meta`], [`Chunk::verify_checksum`] | a ring slot, a TCP chunk frame, a dataset |
//! | `remote_frame` | [`crate::remote::read_frame`] + [`crate::remote::Frame::message`] | the actor port (both sides) |
//! | `control_frame` | [`crate::control::read_frame`] | the control socket (both sides) |
//! | `dataset` | [`crate::dataset::read_dataset`] (one file of a real dataset replaced) | disk |
//! | `checkpoint` | [`crate::checkpoint::read_manifest`], `resume.bin` ([`crate::checkpoint::decode_resume`]) | disk |
//! | `weights` | [`crate::weights::from_blob`] | the weight segment, a TCP weight frame, a checkpoint |
//! | `actor_state` | [`crate::rollout::Actor::restore`] | the learner (a saved actor state) |

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::chunk::{Chunk, ChunkMeta, ChunkSchema};
use crate::policy::{chunk_schema, policy_config_for, PolicyConfig};
use recur_rnn::CellKind;

/// A target's entry point.
pub type Target = fn(&[u8]);

/// The targets, by name (the corpus directories under `fuzz/corpus/`).
pub const TARGETS: [(&str, Target); 7] = [
    ("chunk", chunk),
    ("remote_frame", remote_frame),
    ("control_frame", control_frame),
    ("dataset", dataset),
    ("checkpoint", checkpoint),
    ("weights", weights),
    ("actor_state", actor_state),
];

/// The policies the targets decode for: MaskedCartPole with an LSTM, Pendulum (a Box action)
/// with a 2-layer GRU, RepeatPrevious with a minGRU.
fn policies() -> &'static [(&'static str, PolicyConfig, ChunkSchema)] {
    static P: OnceLock<Vec<(&'static str, PolicyConfig, ChunkSchema)>> = OnceLock::new();
    P.get_or_init(|| {
        [
            ("MaskedCartPole-v1", CellKind::Lstm, 1),
            ("Pendulum-v1", CellKind::Gru, 2),
            ("RepeatPrevious-v0", CellKind::MinGru, 1),
        ]
        .into_iter()
        .map(|(env, cell, layers)| {
            let pc = policy_config_for(env)
                .expect("a built-in env")
                .with_cell(cell)
                .with_hidden_size(8)
                .with_num_layers(layers)
                .with_encoder(vec![8]);
            let schema = chunk_schema(&pc, 2, 4);
            (env, pc, schema)
        })
        .collect()
    })
}

/// The schema of a chunk with images: MiniGrid's observation (a `[7, 7, 3]` image beside four
/// values) with a GRU, the `pixels` columns' layout.
pub fn image_schema() -> ChunkSchema {
    let (_, pc, _) = &policies()[0];
    let pc = PolicyConfig {
        obs_dim: 4,
        ..pc.clone()
    }
    .with_cell(CellKind::Gru)
    .with_images(vec![crate::envs::ImagePart {
        key: "image".into(),
        shape: [7, 7, 3],
    }]);
    chunk_schema(&pc, 2, 4)
}

/// A chunk in any of the targets' schemas, one with images among them (and its framing read
/// alone).
pub fn chunk(data: &[u8]) {
    let _ = Chunk::peek_meta(data);
    let _ = Chunk::encoded_len(data);
    let _ = Chunk::verify_checksum(data);
    let images = image_schema();
    let schemas = policies().iter().map(|(_, _, s)| s).chain([&images]);
    for schema in schemas {
        if let Ok(chunk) = Chunk::decode(data, schema) {
            // What decodes re-encodes to the same bytes.
            let again = chunk.encode(schema).expect("a decoded chunk encodes");
            assert_eq!(Chunk::decode(&again, schema).as_ref(), Ok(&chunk));
        }
    }
}

/// A frame of the actor port, read with the limits before and after the token, as a message
/// of either side.
pub fn remote_frame(data: &[u8]) {
    use crate::remote::{read_frame, ActorMsg, LearnerMsg, Limits};
    let session = Limits {
        message: crate::remote::MESSAGE_MAX,
        chunk: 1 << 16,
        weights: 1 << 16,
    };
    for limits in [Limits::HELLO, session] {
        let mut r = data;
        while let Ok(frame) = read_frame(&mut r, &limits) {
            let _ = frame.message::<ActorMsg>();
            let _ = frame.message::<LearnerMsg>();
        }
    }
}

/// Control-socket frames, as requests and as responses.
pub fn control_frame(data: &[u8]) {
    use crate::control::{read_frame, Request, Response};
    let mut r = data;
    while read_frame::<Request>(&mut r).is_ok() {}
    let mut r = data;
    while read_frame::<Response>(&mut r).is_ok() {}
}

/// A real dataset (two chunks in two files, with its index) with one file replaced by `data`:
/// the first byte picks which (`dataset.json`, a chunk file, `index.bin`).
pub fn dataset(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let files = dataset_files();
    let scratch = scratch_dir("dataset");
    let dir = scratch.path();
    for (i, (name, bytes)) in files.iter().enumerate() {
        let bytes = if i == pick as usize % files.len() {
            rest
        } else {
            bytes
        };
        std::fs::write(dir.join(name), bytes).expect("writing the scratch dataset");
    }
    let _ = crate::dataset::read_dataset(dir);
}

/// The files of a real dataset of the first target policy (built once).
pub fn dataset_files() -> &'static [(String, Vec<u8>)] {
    static F: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    F.get_or_init(|| {
        let (_, _, schema) = &policies()[0];
        let scratch = scratch_dir("dataset-template");
        // The writer creates the dataset directory itself.
        let dir = scratch.path().join("dataset");
        let chunk_bytes = Chunk::zeros(schema, ChunkMeta::new(0, 0, 0, 1))
            .encode(schema)
            .expect("a zero chunk encodes")
            .len();
        // A file size of one chunk: each chunk in a file of its own.
        let mut w = crate::dataset::DatasetWriter::create_with_file_size(
            &dir,
            "MaskedCartPole-v1",
            schema,
            chunk_bytes as u64,
            &crate::dataset::EnvSource::default(),
        )
        .expect("a scratch dataset");
        for seq in 0..2 {
            w.append(&sample_chunk(schema, seq)).expect("appending");
        }
        drop(w);
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .expect("the scratch dataset")
            .map(|e| {
                let path = e.expect("a dir entry").path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&path).expect("reading"))
            })
            .collect();
        files.sort();
        files
    })
}

/// A chunk of `schema` with varied, finite contents (what an actor sends).
pub fn sample_chunk(schema: &ChunkSchema, seq: u64) -> Chunk {
    let mut chunk = Chunk::zeros(schema, ChunkMeta::new(0, 0, seq, 1));
    for (i, x) in chunk.observation.iter_mut().enumerate() {
        *x = (i as f32 * 0.37).sin();
    }
    for (i, p) in chunk.pixels.iter_mut().enumerate() {
        *p = (i * 37 % 256) as u8;
    }
    for (i, r) in chunk.next_reward.iter_mut().enumerate() {
        *r = (i % 3) as f32 - 1.0;
    }
    let n = chunk.is_init.len();
    chunk.is_init[0] = 1;
    chunk.next_done[n - 1] = 1;
    chunk
}

/// A checkpoint directory's `manifest.json` (first byte even) or `resume.bin` (odd).
pub fn checkpoint(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if pick % 2 == 1 {
        let _ = crate::checkpoint::decode_resume(rest);
        return;
    }
    let scratch = scratch_dir("checkpoint");
    let dir = scratch.path();
    std::fs::write(dir.join(crate::checkpoint::CHECKPOINT_MANIFEST), rest).expect("writing");
    if let Ok(manifest) = crate::checkpoint::read_manifest(dir) {
        for file in &manifest.files {
            let _ = crate::checkpoint::read_verified(dir, &manifest, &file.name);
        }
    }
}

/// A weight blob, loaded into each target policy.
pub fn weights(data: &[u8]) {
    for (_, pc, _) in policies() {
        let policy = crate::policy::init_policy(pc, 0).expect("a policy");
        let _ = crate::weights::from_blob(policy, data);
    }
}

/// A saved actor state, restored into an actor of each target policy.
pub fn actor_state(data: &[u8]) {
    use crate::rollout::{Actor, ActorConfig};
    for (env, pc, schema) in policies() {
        let config = ActorConfig::new(*env, schema.envs, schema.steps, 0);
        let policy = crate::policy::init_policy(pc, 0).expect("a policy");
        let mut actor = Actor::new(config, policy).expect("an actor");
        let _ = actor.restore(data);
    }
}

/// A fresh directory for a target's scratch files, removed when it drops (one per call:
/// tests run targets on several threads at once).
fn scratch_dir(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("recur-fuzz-{what}-"))
        .tempdir()
        .expect("a scratch directory")
}

/// Runs every file under `dir/<target>/` through its target; returns how many files each
/// target read (a missing target directory reads 0).
pub fn replay(dir: &Path) -> Vec<(&'static str, usize)> {
    TARGETS
        .iter()
        .map(|&(name, run)| {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(name))
                .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
                .unwrap_or_default();
            files.sort();
            for file in &files {
                let bytes = std::fs::read(file).expect("reading a corpus file");
                run(&bytes);
            }
            (name, files.len())
        })
        .collect()
}

//! `recur-learner export`: a checkpoint's policy in the formats other tools read.
//!
//! ```text
//! recur-learner export --checkpoint runs/mcp --out policy/
//! policy/
//!   policy.safetensors   every parameter under its PyTorch name (the state_dict of the module
//!                        scripts/recur_policy.py builds: the image encoders' convolutions
//!                        too), and the observation statistics
//!   policy.json          the architecture: cell, sizes, spaces, obs_norm, the images and
//!                        their cnn, distribution, state entries, the ONNX file's inputs and
//!                        outputs, the recur version
//!   policy.onnx          the sequential-mode step (opset 17), see [`onnx`]
//! ```
//!
//! The checkpoint is read as `recur-actor --checkpoint` reads it, but strictly: its manifest
//! must be there and every file read must match its length and CRC-32 (a damaged checkpoint is
//! an error naming the file, never a fallback to another one); `checkpoint.old/` is read only
//! when `checkpoint/` is missing (a crash between a checkpoint write's two renames).
//!
//! Writing is all or nothing: the files go into `DIR.tmp/` beside `DIR` (removed first if a
//! killed export left it), are fsynced, and the directory is renamed to `DIR`. An existing,
//! non-empty `DIR` is refused. On an error nothing is left at `DIR` and the temporary
//! directory is removed.

pub mod onnx;
pub mod onnx_proto;
pub mod params;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use common::backend::Cpu;
use common::checkpoint::{
    previous, read_manifest, read_verified, sync_dir, CHECKPOINT_POLICY, CHECKPOINT_WEIGHTS,
};
use common::policy::{Policy, PolicyConfig};
use common::weights::{check_finite, from_blob, layout, layout_hash};
use serde::Serialize;

use params::{
    core_spec, distribution_spec, encoder_widths, images_spec, named_tensors, state_spec,
    EncoderSpec, ObsNormSpec, OnnxSpec, PolicySpec, Source, FORMAT, FORMAT_VERSION,
    FORMAT_VERSION_IMAGES, OBS_NORM_EPS,
};

/// The files of an export directory.
pub const SAFETENSORS_FILE: &str = "policy.safetensors";
pub const JSON_FILE: &str = "policy.json";
pub const ONNX_FILE: &str = "policy.onnx";

/// `recur-learner export`'s arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct ExportArgs {
    /// A run directory (holding checkpoint/) or a checkpoint directory.
    #[arg(long, value_name = "RUN_DIR")]
    pub checkpoint: PathBuf,
    /// The directory to create with policy.safetensors, policy.json and policy.onnx (must not
    /// exist, or be empty).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// An export error, `path: problem`: every one names the file.
fn path_error(path: &Path, problem: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{}: {problem}", path.display())
}

/// What an export wrote (printed by the CLI as one JSON line).
#[derive(Clone, Debug, Serialize)]
pub struct Exported {
    pub out: PathBuf,
    /// The checkpoint directory read.
    pub checkpoint: PathBuf,
    /// Why `checkpoint.old/` was read instead of `checkpoint/`.
    pub fell_back: Option<String>,
    pub weights_version: u64,
    pub cell: &'static str,
    pub files: Vec<&'static str>,
}

/// A checkpoint's policy, read and verified.
struct Loaded {
    policy: Policy<Cpu>,
    dir: PathBuf,
    fell_back: Option<String>,
    algo: String,
    version: u64,
}

/// The checkpoint directory of `dir` (a run directory or a checkpoint directory).
fn checkpoint_dir(dir: &Path) -> anyhow::Result<(PathBuf, Option<String>)> {
    let current = dir.join("checkpoint");
    if current.is_dir() {
        return Ok((current, None));
    }
    let old = previous(&current);
    if old.is_dir() {
        let why = format!(
            "{} is missing (a run stopped while replacing it): exporting {}",
            current.display(),
            old.display()
        );
        return Ok((old, Some(why)));
    }
    if dir.join(CHECKPOINT_WEIGHTS).exists() || dir.join("manifest.json").exists() {
        return Ok((dir.to_path_buf(), None));
    }
    Err(path_error(
        dir,
        if dir.exists() {
            "neither a run directory (no checkpoint/) nor a checkpoint directory (no \
             manifest.json, weights.bin)"
        } else {
            "does not exist"
        },
    ))
}

/// Reads the policy of checkpoint `dir`, checking every file against the manifest.
fn load(dir: &Path) -> anyhow::Result<Loaded> {
    let (ckpt, fell_back) = checkpoint_dir(dir)?;
    let manifest = read_manifest(&ckpt).map_err(|e| path_error(&ckpt, e))?;
    // Its errors name the file too (`path: problem`).
    let verified = |name: &str| read_verified(&ckpt, &manifest, name);
    let policy_path = ckpt.join(CHECKPOINT_POLICY);
    let config_bytes = verified(CHECKPOINT_POLICY)?;
    let config: PolicyConfig = serde_json::from_slice(&config_bytes)
        .map_err(|e| path_error(&policy_path, format!("unknown architecture: {e}")))?;
    let same = |c: &PolicyConfig| serde_json::to_value(c).ok();
    if same(&config) != same(&manifest.policy) {
        return Err(path_error(
            &policy_path,
            "differs from the architecture in manifest.json",
        ));
    }
    let policy = common::policy::init_policy(&config, 0)
        .map_err(|e| path_error(&policy_path, format!("unknown architecture: {e}")))?;
    let weights_path = ckpt.join(CHECKPOINT_WEIGHTS);
    let blob = verified(CHECKPOINT_WEIGHTS)?;
    check_finite(&blob).map_err(|e| path_error(&weights_path, e))?;
    let hash = layout_hash(&layout(&policy));
    if manifest.layout_hash != hash {
        return Err(path_error(
            &weights_path,
            format!(
                "weight layout {:#018x} (manifest.json) does not match the architecture of \
                 policy.json ({hash:#018x})",
                manifest.layout_hash
            ),
        ));
    }
    let (policy, version) = from_blob(policy, &blob).map_err(|e| path_error(&weights_path, e))?;
    Ok(Loaded {
        policy,
        dir: ckpt,
        fell_back,
        algo: manifest.algo,
        version,
    })
}

/// `run.env` of the `config.toml` of the run holding checkpoint `ckpt`, when there is one.
fn run_env(ckpt: &Path) -> Option<String> {
    let config = ckpt.parent()?.join("config.toml");
    let text = std::fs::read_to_string(config).ok()?;
    let value: toml::Value = toml::from_str(&text).ok()?;
    value.get("run")?.get("env")?.as_str().map(str::to_string)
}

/// The three files of the export of `loaded`, as `(name, bytes)`.
fn render(loaded: &Loaded) -> anyhow::Result<Vec<(&'static str, Vec<u8>)>> {
    let policy = &loaded.policy;
    let config = policy.config();
    let tensors = named_tensors(policy);

    let raw: Vec<Vec<u8>> = (tensors.iter())
        .map(|t| t.values.iter().flat_map(|v| v.to_le_bytes()).collect())
        .collect();
    let views = (tensors.iter().zip(&raw))
        .map(|(t, raw)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, t.shape.clone(), raw)
                .map(|v| (t.name.clone(), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| path_error(Path::new(SAFETENSORS_FILE), e))?;
    let metadata = HashMap::from([
        ("format".to_string(), "pt".to_string()),
        ("recur_version".into(), env!("CARGO_PKG_VERSION").into()),
    ]);
    let safetensors = safetensors::tensor::serialize(views, Some(metadata))
        .map_err(|e| path_error(Path::new(SAFETENSORS_FILE), e))?;

    let onnx = onnx::step_model(&onnx::StepModel::of(
        policy,
        &tensors,
        env!("CARGO_PKG_VERSION"),
    ));

    let images = images_spec(policy);
    let spec = PolicySpec {
        format: FORMAT,
        format_version: match images {
            Some(_) => FORMAT_VERSION_IMAGES,
            None => FORMAT_VERSION,
        },
        recur_version: env!("CARGO_PKG_VERSION"),
        source: Source {
            checkpoint: loaded.dir.display().to_string(),
            algo: loaded.algo.clone(),
            weights_version: loaded.version,
            env: run_env(&loaded.dir),
        },
        obs_dim: config.obs_dim,
        obs_norm: ObsNormSpec {
            enabled: config.obs_norm,
            eps: OBS_NORM_EPS,
            formula: "clamp((obs - mean) / sqrt(var + eps), -clip, clip)",
        },
        encoder: EncoderSpec {
            widths: encoder_widths(policy),
            activation: "tanh",
        },
        images,
        core: core_spec(policy),
        critic_core: config.critic_core,
        state: state_spec(policy),
        action: config.action.clone(),
        distribution: distribution_spec(&config.action),
        onnx: OnnxSpec {
            file: ONNX_FILE,
            opset: onnx::OPSET,
            inputs: onnx::input_names(config),
            outputs: onnx::output_names(config.cell, &config.action),
        },
    };
    let json = serde_json::to_string_pretty(&spec).expect("the spec serialises") + "\n";
    Ok(vec![
        (SAFETENSORS_FILE, safetensors),
        (JSON_FILE, json.into_bytes()),
        (ONNX_FILE, onnx),
    ])
}

/// Exports the policy of checkpoint `checkpoint` (a run directory or a checkpoint
/// directory) into the new directory `out` (see the module docs).
pub fn export(checkpoint: &Path, out: &Path) -> anyhow::Result<Exported> {
    let loaded = load(checkpoint)?;
    exportable(loaded.policy.config())
        .map_err(|e| anyhow::anyhow!("{}: {e}", loaded.dir.display()))?;
    let files = render(&loaded)?;
    write_dir(out, &files)?;
    Ok(Exported {
        out: out.to_path_buf(),
        checkpoint: loaded.dir.clone(),
        fell_back: loaded.fell_back.clone(),
        weights_version: loaded.version,
        cell: loaded.policy.config().cell.name(),
        files: files.iter().map(|(name, _)| *name).collect(),
    })
}

/// Refuses a policy the exported module would not reproduce.
fn exportable(config: &common::policy::PolicyConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.memory,
        "its policy has policy.memory = false (every step from a zero state, a feedforward \
         floor), which the exported recurrent module does not reproduce; export a policy with \
         memory"
    );
    Ok(())
}

/// Writes `files` into the new directory `out`: all of them, or (on an error) none.
fn write_dir(out: &Path, files: &[(&str, Vec<u8>)]) -> anyhow::Result<()> {
    if out.exists() {
        let empty = std::fs::read_dir(out)
            .map_err(|e| path_error(out, format!("exists and cannot be read: {e}")))?
            .next()
            .is_none();
        if !empty {
            return Err(path_error(
                out,
                "exists and is not empty; remove it or choose another --out",
            ));
        }
    }
    // `out` with `.tmp` appended to its last component.
    let mut tmp = (out.file_name())
        .ok_or_else(|| path_error(out, "has no final component to name a directory"))?
        .to_os_string();
    tmp.push(".tmp");
    let tmp = out.with_file_name(tmp);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| {
            path_error(
                &tmp,
                format!("left by an unfinished export, cannot be removed: {e}"),
            )
        })?;
    }
    std::fs::create_dir(&tmp).map_err(|e| path_error(&tmp, format!("cannot be created: {e}")))?;
    let written = (|| {
        for (name, bytes) in files {
            let path = tmp.join(name);
            let mut file = std::fs::File::create(&path)
                .map_err(|e| path_error(&path, format!("cannot be created: {e}")))?;
            file.write_all(bytes)
                .and_then(|()| file.sync_all())
                .map_err(|e| path_error(&path, format!("writing {} bytes: {e}", bytes.len())))?;
        }
        sync_dir(&tmp).map_err(|e| path_error(&tmp, format!("{e:#}")))?;
        // Renaming onto an empty directory replaces it (rename(2)).
        std::fs::rename(&tmp, out)
            .map_err(|e| path_error(out, format!("cannot rename {} to it: {e}", tmp.display())))?;
        let parent = out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sync_dir(parent).map_err(|e| path_error(parent, format!("{e:#}")))
    })();
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("recur-export-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A directory is written whole; an existing non-empty one is refused untouched; an empty
    /// one is replaced; a path under a regular file is refused naming it, leaving nothing.
    #[test]
    fn a_policy_without_memory_is_refused() {
        use common::policy::{ActionSpec, PolicyConfig};
        let config = PolicyConfig::new(3, ActionSpec::Discrete { n: 2 });
        assert!(exportable(&config).is_ok());
        let err = exportable(&config.with_memory(false))
            .unwrap_err()
            .to_string();
        assert!(err.contains("policy.memory = false"), "{err}");
    }

    #[test]
    fn the_output_directory_is_written_whole_or_not_at_all() {
        let dir = temp("write");
        let files = [("a", b"one".to_vec()), ("b", b"two".to_vec())];
        let out = dir.join("out");
        write_dir(&out, &files).unwrap();
        assert_eq!(std::fs::read(out.join("b")).unwrap(), b"two");
        assert!(!dir.join("out.tmp").exists());

        let err = write_dir(&out, &[("a", b"new".to_vec())]).unwrap_err();
        assert!(err.to_string().contains("out") && err.to_string().contains("not empty"));
        assert_eq!(std::fs::read(out.join("a")).unwrap(), b"one");

        let empty = dir.join("empty");
        std::fs::create_dir(&empty).unwrap();
        write_dir(&empty, &files).unwrap();
        assert_eq!(std::fs::read(empty.join("a")).unwrap(), b"one");

        std::fs::write(dir.join("file"), b"x").unwrap();
        let under_file = dir.join("file").join("out");
        let err = write_dir(&under_file, &files).unwrap_err().to_string();
        assert!(err.contains("file/out.tmp"), "{err}");
        assert!(!dir.join("file").join("out.tmp").exists());

        // A stale temporary directory from a killed export is replaced.
        let stale = dir.join("again.tmp");
        std::fs::create_dir(&stale).unwrap();
        std::fs::write(stale.join("junk"), b"j").unwrap();
        write_dir(&dir.join("again"), &files).unwrap();
        assert!(!stale.exists() && !dir.join("again").join("junk").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

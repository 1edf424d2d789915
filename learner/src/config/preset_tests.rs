//! The shipped configs: every file under `configs/` loads, and every POPGym preset trains the id
//! its file is named for.

use super::*;

#[test]
fn every_shipped_config_is_valid() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            TrainConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            "cartpole.toml",
            "masked_cartpole.toml",
            "masked_cartpole_mingru.toml",
            "masked_pendulum.toml",
            "minigrid_memory_s11.toml",
            "minigrid_memory_s7.toml",
            "pendulum.toml",
            "pixel_cartpole.toml",
            "popgym_position_only_cartpole.toml",
            "popgym_repeat_previous.toml",
            "repeat_previous.toml",
            "repeat_previous_dqn.toml"
        ]
    );
}

/// The POPGym ids the presets of `configs/<dir>` train, each checked valid and training the id
/// its file is named for (`<Family><Level>.toml`, possibly with the previous action appended).
fn popgym_presets_in(dir: &str) -> Vec<String> {
    let dir = format!("{}/../configs/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let config = TrainConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let id = config
            .run
            .env
            .strip_suffix(common::envs::PREVIOUS_ACTION_SUFFIX)
            .unwrap_or(&config.run.env)
            .to_string();
        assert_eq!(id, format!("popgym-{stem}-v0"), "{}", path.display());
        ids.push(id);
    }
    ids.sort();
    ids
}

/// `configs/popgym/<Family><Level>.toml`: one valid preset per native POPGym id, training it.
#[test]
fn every_popgym_preset_is_valid_and_trains_its_own_id() {
    let mut want: Vec<String> = common::envs::POPGYM_IDS
        .iter()
        .map(|s| s.to_string())
        .collect();
    want.sort();
    assert_eq!(popgym_presets_in("popgym"), want);
}

/// `configs/popgym-100k/`: the 100k-frame presets of the Easy ids whose long-budget preset is
/// slow to start (the side by side with SB3 at 100k frames), each valid and training its id.
#[test]
fn every_100k_popgym_preset_trains_an_easy_id_in_100k_frames() {
    let ids = popgym_presets_in("popgym-100k");
    assert!(!ids.is_empty());
    for id in ids {
        assert!(
            common::envs::POPGYM_IDS.contains(&id.as_str()) && id.contains("Easy"),
            "{id}"
        );
        let stem = id.trim_start_matches("popgym-").trim_end_matches("-v0");
        let path = format!(
            "{}/../configs/popgym-100k/{stem}.toml",
            env!("CARGO_MANIFEST_DIR")
        );
        let config = TrainConfig::load(std::path::Path::new(&path)).unwrap();
        assert_eq!(config.run.frames, 100_000, "{path}");
    }
}

#[test]
fn every_shipped_replay_config_is_valid() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/replay");
    let mut algos = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let config = ReplayConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            path.file_stem().unwrap().to_string_lossy(),
            config.replay.algo.name(),
            "configs/replay/<algo>.toml is the default config of --algo <algo>"
        );
        algos.push(config.replay.algo.name());
    }
    algos.sort();
    assert_eq!(algos, ["bc", "dqn", "ppo"]);
}

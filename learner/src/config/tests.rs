//! The config files end to end: parse, defaults, round trips, and the errors of every check.

use common::backend::TrainDevice;
use common::policy::CriticCore;
use recur_rnn::RecurrentBackend;

use super::*;

/// The error loading `text` as a training config, `x.toml`.
fn train_err(text: &str) -> String {
    TrainConfig::parse(text, "x.toml").unwrap_err().to_string()
}

/// The error loading `text` as a replay config, `b.toml`.
fn replay_err(text: &str) -> String {
    ReplayConfig::parse(text, "b.toml").unwrap_err().to_string()
}

const GOOD: &str = r#"
[run]
env = "MaskedCartPole-v1"
frames = 1000000

[collector]
envs_per_actor = 8
steps = 32

[policy]
cell = "lstm"
hidden_size = 64

[ppo]
frames_per_update = 1024
epochs = 4
slice_len = 32
num_slices = 8
lr = 1e-3
gamma = 0.99
gae_lambda = 0.95
clip_eps = 0.2
value_coef = 0.5
entropy_coef = 0.01
max_grad_norm = 0.5
"#;

#[test]
fn a_good_config_loads_with_defaults_and_round_trips() {
    let c = TrainConfig::parse(GOOD, "good.toml").unwrap();
    assert_eq!(c.collector.mode, CollectorMode::Async);
    assert_eq!(c.policy.encoder.mlp(), &[64]);
    assert_eq!(c.policy.backend, RecurrentBackend::Auto);
    assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
}

#[test]
fn unknown_keys_and_bad_values_are_named() {
    let err = train_err(&GOOD.replace("epochs = 4", "epochs = 4\nepoch = 3"));
    assert!(
        err.contains("x.toml") && err.contains("unknown field `epoch`"),
        "{err}"
    );
    let err = train_err(&GOOD.replace("gamma = 0.99", "gamma = 1.5"));
    assert!(err.contains("`ppo.gamma` = 1.5"), "{err}");
    let err = train_err(&GOOD.replace("frames_per_update = 1024", "frames_per_update = 1000"));
    assert!(
        err.contains("`ppo.frames_per_update` = 1000") && err.contains("= 256"),
        "{err}"
    );
    let err = train_err(&GOOD.replace("MaskedCartPole-v1", "Masked"));
    assert!(err.contains("`run.env` = \"Masked\""), "{err}");
    let err = train_err(&GOOD.replace("cell = \"lstm\"", "cell = \"rnn\""));
    assert!(err.contains("rnn") && err.contains("cell"), "{err}");
    let err = train_err(&GOOD.replace("[ppo]", "[ppo]\nmode = \"sync\""));
    assert!(err.contains("unknown field `mode`"), "{err}");
}

/// The shipped learner-only BC config, configs/replay/bc.toml.
fn bc_toml() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/replay/bc.toml"
    ))
    .expect("configs/replay/bc.toml is readable")
}

/// The error loading bc.toml with `replay.device = device`.
fn replay_device_error(device: &str) -> String {
    let toml = bc_toml().replace("device = \"cpu\"", &format!("device = \"{device}\""));
    replay_err(&toml)
}

fn with_device(device: &str) -> String {
    GOOD.replace(
        "frames = 1000000",
        &format!("frames = 1000000\ndevice = \"{device}\""),
    )
}

#[test]
fn the_device_is_the_cpu_unless_set() {
    let c = TrainConfig::parse(GOOD, "good.toml").unwrap();
    assert_eq!(c.run.device, TrainDevice::Cpu);
    let c = TrainConfig::parse(&with_device("cpu"), "x.toml").unwrap();
    assert_eq!(c.run.device, TrainDevice::Cpu);
    assert!(c.to_toml().contains("device = \"cpu\""), "{}", c.to_toml());
}

#[test]
fn a_bad_device_is_named_with_its_value() {
    for bad in ["gpu", "cuda:x", "cuda:", "CPU"] {
        let err = train_err(&with_device(bad));
        assert!(
            err.contains("x.toml")
                && err.contains("device")
                && err.contains(&format!("{bad:?}"))
                && err.contains("\"cuda:N\""),
            "{bad}: {err}"
        );
    }
    let err = replay_device_error("tpu");
    assert!(err.contains("device") && err.contains("\"tpu\""), "{err}");
}

/// Without the `cuda` feature a CUDA device is refused at load, saying how to build it.
#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_is_refused_without_the_cuda_feature() {
    for (device, shown) in [
        ("cuda", "cuda:0"),
        ("cuda:0", "cuda:0"),
        ("cuda:2", "cuda:2"),
    ] {
        let err = train_err(&with_device(device));
        assert!(
            err.contains(&format!("`run.device` = \"{shown}\""))
                && err.contains("built without `--features cuda`"),
            "{err}"
        );
    }
    let err = replay_device_error("cuda:0");
    assert!(
        err.contains("`replay.device` = \"cuda:0\"") && err.contains("--features cuda"),
        "{err}"
    );
}

/// With the `cuda` feature a CUDA device loads (the GPU is looked for when training
/// starts), `auto` stays `auto` (it resolves to `fused` there: the CubeCL kernels) and
/// `fused` is accepted.
#[cfg(feature = "cuda")]
#[test]
fn cuda_loads_with_the_feature_and_with_fused() {
    let c = TrainConfig::parse(&with_device("cuda:1"), "x.toml").unwrap();
    assert_eq!(c.run.device, TrainDevice::Cuda(1));
    assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
    let fused =
        with_device("cuda").replace("hidden_size = 64", "hidden_size = 64\nbackend = \"fused\"");
    let c = TrainConfig::parse(&fused, "x.toml").unwrap();
    assert_eq!(c.policy.backend, RecurrentBackend::Fused);
}

/// The learning-quality keys: schedules and normalization parse; bad values and
/// combinations are refused naming the key.
#[test]
fn learning_quality_keys_are_checked() {
    let good = format!(
        "{GOOD}reward_norm = true\nlr_schedule = \"linear\"\n\n[eval]\nevery_frames = 5000\n"
    )
    .replace(
        "hidden_size = 64",
        "hidden_size = 64\nobs_norm = true\ncritic_core = \"separate\"",
    );
    let c = TrainConfig::parse(&good, "x.toml").unwrap();
    let ppo = c.ppo.as_ref().unwrap();
    assert_eq!(ppo.lr_schedule, Schedule::Linear);
    assert_eq!(ppo.clip_schedule, Schedule::Constant);
    assert_eq!(Schedule::Linear.at(1e-3, 0.25), 0.75e-3);
    assert_eq!(Schedule::Linear.at(1e-3, 2.0), 0.0);
    assert_eq!(c.eval.as_ref().unwrap().episodes, 10);
    assert!(c.policy.obs_norm && c.policy.critic_core == CriticCore::Separate);
    assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);

    let err = train_err(&good.replace("lr_schedule = \"linear\"", "lr_schedule = \"cosine\""));
    assert!(err.contains("cosine") && err.contains("linear"), "{err}");
    let err = train_err(&good.replace("obs_norm = true", "obs_norm = true\nobs_clip = 0.0"));
    assert!(err.contains("`policy.obs_clip` = 0"), "{err}");
    let err = train_err(&good.replace("every_frames = 5000", "every_frames = 5000\nepisodes = 0"));
    assert!(err.contains("`eval.episodes` = 0"), "{err}");
    let err = train_err(&good.replace(
        "reward_norm = true",
        "reward_norm = true\nclip_value = true",
    ));
    assert!(
        err.contains("`ppo.clip_value` = true") && err.contains("not implemented"),
        "{err}"
    );
    let update = good.replace(
        "reward_norm = true",
        "reward_norm = true\nupdate = \"burn\"",
    );
    let c = TrainConfig::parse(&update, "x.toml").unwrap();
    assert_eq!(c.ppo.as_ref().unwrap().update, UpdatePath::Burn);
    let err =
        train_err(&good.replace("reward_norm = true", "reward_norm = true\nupdate = \"jit\""));
    assert!(err.contains("jit"), "{err}");
    let dqn = include_str!("../../../configs/repeat_previous_dqn.toml");
    let err = train_err(&dqn.replace("hidden_size = 64", "hidden_size = 64\nobs_norm = true"));
    assert!(
        err.contains("`policy.obs_norm` = true") && err.contains("PPO"),
        "{err}"
    );
    let err = train_err(&dqn.replace(
        "hidden_size = 64",
        "hidden_size = 64\ncritic_core = \"separate\"",
    ));
    assert!(err.contains("`policy.critic_core`"), "{err}");
}

#[test]
fn dqn_and_replay_errors_name_the_key() {
    let dqn = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/repeat_previous_dqn.toml"
    ))
    .unwrap();
    let err = train_err(&dqn.replace("burn_in = 0 ", "burn_in = 16 "));
    assert!(
        err.contains("`dqn.burn_in` = 16") && err.contains("slice_len = 16"),
        "{err}"
    );
    let err = train_err(&dqn.replace("n_step = 1", "n_step = 0"));
    assert!(err.contains("`dqn.n_step` = 0"), "{err}");
    let err = train_err(&dqn.replace("algo = \"dqn\"", "algo = \"bc\""));
    assert!(
        err.contains("`run.algo` = \"bc\"") && err.contains("replay"),
        "{err}"
    );
    let no_dqn = &dqn[..dqn.find("[dqn]").unwrap()];
    let err = train_err(no_dqn);
    assert!(err.contains("`dqn` = missing"), "{err}");
    let bc = bc_toml();
    let err = replay_err(&bc.replace("updates = 5_000", "updates = 0"));
    assert!(err.contains("`replay.updates` = 0"), "{err}");
    let err = replay_err(&bc.replace("algo = \"bc\"", "algo = \"dqn\""));
    assert!(err.contains("`dqn` = missing"), "{err}");
}

#[test]
fn own_environments_are_accepted_where_an_actor_can_build_them() {
    // Unknown ids: refused pointing at the list of known ones, unless a custom actor builds
    // them.
    let err = train_err(&GOOD.replace("MaskedCartPole-v1", "TMaze-v0"));
    assert!(
        err.contains("`run.env` = \"TMaze-v0\"")
            && err.contains("recur-actor --list-envs")
            && err.contains("collector.actor_bin"),
        "{err}"
    );
    let custom = GOOD.replace("MaskedCartPole-v1", "TMaze-v0").replace(
        "[collector]",
        "[collector]\nactor_bin = \"target/release/examples/tmaze\"",
    );
    let c = TrainConfig::parse(&custom, "x.toml").unwrap();
    assert_eq!(
        c.collector.actor_bin.as_deref(),
        Some("target/release/examples/tmaze")
    );
    assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
    // Gymnasium ids with imports and kwargs.
    let gym = GOOD.replace(
        "env = \"MaskedCartPole-v1\"",
        "env = \"gymnasium:popgym-RepeatPreviousEasy-v0\"\nenv_imports = [\"popgym\"]\n\
         env_kwargs = { foo = 1 }",
    );
    let c = TrainConfig::parse(&gym, "x.toml").unwrap();
    assert_eq!(c.run.env_imports, ["popgym"]);
    assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
    // Imports and kwargs only with gymnasium ids; an empty gymnasium id.
    let err = train_err(&GOOD.replace(
        "frames = 1000000",
        "frames = 1000000\nenv_imports = [\"popgym\"]",
    ));
    assert!(
        err.contains("`run.env_imports`") && err.contains("gymnasium"),
        "{err}"
    );
    let err = train_err(&GOOD.replace("MaskedCartPole-v1", "gymnasium:"));
    assert!(err.contains("`run.env` = \"gymnasium:\""), "{err}");
}

/// Issue 20: every float finite and in range, sizes that cannot abort an allocation, and
/// values set by a flag blamed on the flag.
#[test]
fn listen_allows_zero_local_actors_and_is_checked() {
    let with =
        |extra: &str| GOOD.replace("frames = 1000000", &format!("frames = 1000000\n{extra}"));
    let ok = TrainConfig::parse(&with("actors = 0\nlisten = \"0.0.0.0:7070\""), "x.toml").unwrap();
    assert_eq!(ok.run.listen.as_deref(), Some("0.0.0.0:7070"));
    let err = train_err(&with("actors = 0"));
    assert!(
        err.contains("`run.actors` = 0") && err.contains("0 only with `run.listen`"),
        "{err}"
    );
    for bad in ["7070", ":7070", "host:port", "host:70000"] {
        let err = train_err(&with(&format!("listen = \"{bad}\"")));
        assert!(
            err.contains(&format!("`run.listen` = \"{bad}\"")) && err.contains("HOST:PORT"),
            "{err}"
        );
    }
    let sync =
        with("listen = \"127.0.0.1:0\"").replace("steps = 32", "steps = 32\nmode = \"sync\"");
    let err = train_err(&sync);
    assert!(
        err.contains("`collector.mode` = \"sync\"") && err.contains("run.listen"),
        "{err}"
    );
}

#[test]
fn floats_are_finite_sizes_bounded_and_flags_blamed() {
    for (from, to, key) in [
        (
            "max_grad_norm = 0.5",
            "max_grad_norm = 0.5\nreward_scale = nan",
            "`ppo.reward_scale` = NaN",
        ),
        (
            "max_grad_norm = 0.5",
            "max_grad_norm = 0.5\nreward_scale = -1.0",
            "`ppo.reward_scale` = -1",
        ),
        (
            "frames = 1000000",
            "frames = 1000000\ntarget_return = nan",
            "`run.target_return` = NaN",
        ),
        (
            "frames = 1000000",
            "frames = 1000000\ntarget_return = inf",
            "`run.target_return` = inf",
        ),
        (
            "frames = 1000000",
            "frames = 1000000\ntarget_window = 50",
            "`run.target_window` = 50",
        ),
        (
            "steps = 32",
            "steps = 32\nrestart_window_s = 0.0",
            "`collector.restart_window_s` = 0",
        ),
        (
            "steps = 32",
            "steps = 32\nrestart_window_s = 2e9",
            "`collector.restart_window_s` = 2000000000",
        ),
        (
            "steps = 32",
            "steps = 32\nrestart_backoff_s = 7200.0",
            "`collector.restart_backoff_s` = 7200",
        ),
    ] {
        let err = train_err(&GOOD.replace(from, to));
        assert!(err.contains(key) && err.contains("x.toml"), "{to}: {err}");
    }
    let err = train_err(&GOOD.replace("hidden_size = 64", "hidden_size = 1000000"));
    assert!(
        err.contains("`policy.hidden_size` = 1000000")
            && err.contains("would need")
            && err.contains("TiB of memory"),
        "{err}"
    );
    let err = train_err(&GOOD.replace("steps = 32", "steps = 32\nring_slots = 1000000000"));
    assert!(
        err.contains("`collector.ring_slots` = 1000000000") && err.contains("of memory"),
        "{err}"
    );
    // A value the file has is blamed on the file; one a flag set, on the flag.
    let mut c = TrainConfig::parse(GOOD, "good.toml").unwrap();
    c.run.actors = Some(3000);
    let flags = [("--actors", "run.actors"), ("--frames", "run.frames")];
    let err = blame_flags(c.validate("good.toml"), &flags)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("command-line flag --actors 3000: `run.actors` = 3000")
            && err.contains("in 1..2048"),
        "{err}"
    );
    let err = train_err(&GOOD.replace("frames = 1000000", "frames = 1000000\nactors = 3000"));
    let c = TrainConfig::parse(GOOD, "good.toml").unwrap();
    assert!(blame_flags(c.validate("good.toml"), &flags).is_ok());
    assert!(
        err.starts_with("config x.toml: `run.actors` = 3000"),
        "{err}"
    );
}

/// `run.tensorboard` / `replay.tensorboard`: on unless set to false; a boolean, named when not.
#[test]
fn tensorboard_is_on_by_default_and_a_boolean() {
    let c = TrainConfig::parse(GOOD, "good.toml").unwrap();
    assert!(c.run.tensorboard);
    assert!(
        c.to_toml().contains("tensorboard = true"),
        "{}",
        c.to_toml()
    );
    let off = GOOD.replace("frames = 1000000", "frames = 1000000\ntensorboard = false");
    let c = TrainConfig::parse(&off, "x.toml").unwrap();
    assert!(!c.run.tensorboard);
    assert_eq!(TrainConfig::parse(&c.to_toml(), "resolved").unwrap(), c);
    let err = train_err(&GOOD.replace("frames = 1000000", "frames = 1000000\ntensorboard = 0"));
    assert!(
        err.contains("x.toml") && err.contains("tensorboard") && err.contains("bool"),
        "{err}"
    );
    let bc = bc_toml();
    assert!(
        ReplayConfig::parse(&bc, "b.toml")
            .unwrap()
            .replay
            .tensorboard
    );
    let off = bc.replace("[replay]", "[replay]\ntensorboard = false");
    assert!(
        !ReplayConfig::parse(&off, "b.toml")
            .unwrap()
            .replay
            .tensorboard
    );
}

/// The required keys of every section of the training and the replay config.
const TRAIN_REQUIRED: &str = r#"
run = { env = "CartPole-v1", frames = 1 }
collector = { envs_per_actor = 1, steps = 1 }
policy = { cell = "lstm", hidden_size = 1 }
ppo = { frames_per_update = 1, epochs = 1, slice_len = 1, num_slices = 1, lr = 1.0, gamma = 1.0,
        gae_lambda = 1.0, clip_eps = 1.0, value_coef = 1.0, entropy_coef = 1.0, max_grad_norm = 1.0 }
dqn = { slice_len = 1, num_slices = 1, lr = 1.0, gamma = 1.0, max_grad_norm = 1.0 }
eval = { every_frames = 1 }
"#;
const REPLAY_REQUIRED: &str = r#"
replay = { algo = "bc", updates = 1 }
policy = { cell = "lstm", hidden_size = 1 }
bc = { slice_len = 1, num_slices = 1, lr = 1.0, max_grad_norm = 1.0 }
"#;

/// `SECTION.KEY` -> its default as docs/config.md shows it: `required`, `unset` (no value), or
/// the TOML value. The keys are serde's own list (the error an unknown key gets), so a key
/// added to the schema shows up here.
fn schema_keys<T: serde::de::DeserializeOwned + serde::Serialize>(
    required: &str,
    rows: &mut std::collections::BTreeMap<String, String>,
) {
    let given: toml::Table = toml::from_str(required).unwrap();
    let full = toml::Table::try_from(toml::from_str::<T>(required).unwrap()).unwrap();
    for (section, keys) in &given {
        let mut probe = given.clone();
        probe[section]
            .as_table_mut()
            .unwrap()
            .insert("zz_probe".into(), 0.into());
        let err = toml::from_str::<T>(&toml::to_string(&probe).unwrap())
            .err()
            .unwrap()
            .to_string();
        let expected = err
            .split("expected")
            .nth(1)
            .unwrap()
            .lines()
            .next()
            .unwrap();
        for key in expected.split('`').skip(1).step_by(2) {
            let default = match (keys.get(key), full[section].get(key)) {
                (Some(_), _) => "required".to_string(),
                (None, Some(toml::Value::Float(f))) => format!("{:?}", *f as f32),
                (None, Some(v)) => v.to_string(),
                (None, None) => "unset".to_string(),
            };
            rows.insert(format!("{section}.{key}"), default);
        }
    }
}

/// docs/config.md lists every key of the schema with its default, and no other.
#[test]
fn docs_config_md_lists_every_key_with_its_default() {
    let mut schema = std::collections::BTreeMap::new();
    schema_keys::<TrainConfig>(TRAIN_REQUIRED, &mut schema);
    schema_keys::<ReplayConfig>(REPLAY_REQUIRED, &mut schema);
    let docs = include_str!("../../../docs/config.md");
    let documented: std::collections::BTreeMap<String, String> = docs
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.strip_prefix("| `")?.splitn(3, '|').collect();
            let key = cells[0].trim().trim_end_matches('`');
            Some((
                key.to_string(),
                cells.get(1)?.trim().trim_matches('`').to_string(),
            ))
        })
        .collect();
    let table: String = schema
        .iter()
        .filter(|(k, v)| documented.get(*k) != Some(v))
        .map(|(k, v)| format!("| `{k}` | `{v}` | |\n"))
        .collect();
    let extra: Vec<&String> = documented
        .keys()
        .filter(|k| !schema.contains_key(*k))
        .collect();
    assert!(
        table.is_empty() && extra.is_empty(),
        "docs/config.md lacks (or has another default for) these rows:\n{table}and documents \
         keys the schema does not have: {extra:?}"
    );
}

//! The convolutional encoder against torch's forward and parameter gradients on every file of
//! `$RECUR_REFERENCE_DIR/encoder` (see its README), and the checks' power: a reference with
//! one value perturbed fails them.

mod support;

use recur_rnn::encoder::{Encoder, EncoderConfig, EncoderGrads, EncoderLayer, ImageShape, Tape};
use recur_rnn::fused;
use serde_json::Value;
use support::{floats, reference_dir};

/// The README's tolerance: absolute, relative for values above 1.
const TOL: f32 = 1e-5;

/// Every `.json` of the reference `encoder/` folder; fails (never skips) when there is none.
fn reference_files() -> Vec<(String, Value)> {
    let dir = reference_dir().join("encoder");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "reference folder {} cannot be read ({e}); set RECUR_REFERENCE_DIR to the folder \
             holding encoder/ (default tests/reference in the repository)",
            dir.display()
        )
    });
    let mut files: Vec<_> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .json reference in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a readable reference");
            let v = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: invalid JSON: {e}", p.display()));
            (p.file_stem().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect()
}

fn usize_of(v: &Value, key: &str) -> usize {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not an integer in {v}")) as usize
}

/// The file's encoder with its parameters loaded, and its frames.
fn encoder_of(file: &Value) -> (Encoder, Vec<u8>, usize) {
    assert_eq!(file["input_layout"], "NHWC uint8");
    assert_eq!(file["flatten_order"], "CHW");
    assert_eq!(file["features_activation"], "relu");
    let layers = file["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(|l| match l["type"].as_str() {
            Some("conv") => {
                assert_eq!(l["activation"], "relu", "{l}");
                EncoderLayer::conv(
                    usize_of(l, "out_channels"),
                    usize_of(l, "kernel"),
                    usize_of(l, "stride"),
                    usize_of(l, "padding"),
                )
            }
            Some("maxpool") => EncoderLayer::Maxpool {
                kernel: usize_of(l, "kernel"),
            },
            other => panic!("layer type {other:?}"),
        })
        .collect();
    let config = EncoderConfig {
        layers,
        scale: file["scale"].as_f64().expect("scale") as f32,
        features: usize_of(file, "features"),
        onehot: None,
    };
    let (shape, obs) = floats(&file["obs"]);
    let input = ImageShape::new(shape[1], shape[2], shape[3]);
    let mut enc = Encoder::new(&config, input, 0).expect("the reference's config is valid");
    assert_eq!(enc.plan().flat, usize_of(file, "flat_size"));
    let names: Vec<&str> = file["param_names"]
        .as_array()
        .expect("param_names")
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(enc.param_names(), names, "torch's names and order");
    for name in names {
        let (shape, values) = floats(&file["params"][name]);
        let want: Vec<usize> = enc
            .params()
            .find(|(n, ..)| *n == name)
            .map(|(_, s, _)| s.to_vec())
            .unwrap();
        assert_eq!(shape, want, "{name}: torch's layout");
        enc.set_param(name, &values).unwrap();
    }
    let obs = obs
        .iter()
        .map(|&x| {
            assert!(
                x.fract() == 0.0 && (0.0..=255.0).contains(&x),
                "obs value {x}"
            );
            x as u8
        })
        .collect();
    (enc, obs, shape[0])
}

/// The first value outside the tolerance, described; `None` when all are within it.
fn mismatch(what: &str, got: &[f32], want: &[f32]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    got.iter().zip(want).enumerate().find_map(|(i, (&g, &w))| {
        let d = (g - w).abs();
        let ok = d <= TOL || d <= TOL * w.abs();
        (!ok).then(|| format!("{what}[{i}] = {g}, reference {w} (|diff| {d:e})"))
    })
}

/// Every mismatch of the encoder's features and gradients against `file`.
fn check(file: &Value) -> Vec<String> {
    let (mut enc, obs, frames) = encoder_of(file);
    let mut tape = Tape::default();
    let features = enc.forward_train(&obs, frames, &mut tape).unwrap().to_vec();
    let mut bad = Vec::new();
    bad.extend(mismatch(
        "features_out",
        &features,
        &floats(&file["features_out"]).1,
    ));
    let inference = enc.forward(&obs, frames).unwrap();
    assert_eq!(
        inference, features,
        "forward and forward_train agree exactly"
    );
    let grad_features = floats(&file["grad_features"]).1;
    let mut grads = EncoderGrads::zeros(&enc);
    enc.backward(&tape, &grad_features, &mut grads).unwrap();
    let want = file["grads"].as_object().expect("grads");
    assert_eq!(
        want.len(),
        enc.param_names().len(),
        "a gradient per parameter"
    );
    for (name, got) in grads.iter() {
        let reference = want
            .get(name)
            .unwrap_or_else(|| panic!("no reference for {name}"));
        bad.extend(mismatch(
            &format!("grads.{name}"),
            got,
            &floats(reference).1,
        ));
    }
    bad
}

#[test]
fn every_reference_file_matches_torch() {
    let files = reference_files();
    for (name, file) in &files {
        let bad = check(file);
        assert!(bad.is_empty(), "{name}: {bad:#?}");
        // The same on one thread (the multi-threaded split sums per-thread gradients).
        let bad = fused::single_threaded(|| check(file));
        assert!(bad.is_empty(), "{name} on one thread: {bad:#?}");
    }
}

/// Moves `data[at]` of the tensor at `path` (a `{"shape", "data"}` object) by a relative
/// 1e-3 (at least 1e-3): 100 times the tolerance.
fn perturb(file: &mut Value, path: &[&str], at: usize) {
    let mut v = &mut *file;
    for key in path {
        v = &mut v[*key];
    }
    let x = &mut v["data"][at];
    let old = x.as_f64().unwrap();
    *x = Value::from(old + 1e-3 * old.abs().max(1.0));
}

#[test]
fn a_perturbed_reference_fails_the_check() {
    for (name, file) in reference_files() {
        let n_features = floats(&file["features_out"]).1.len();
        let cases: Vec<(Vec<&str>, usize)> = vec![
            (vec!["features_out"], n_features / 2),
            (vec!["grads", "convs.0.weight"], 3),
            (vec!["grads", "linear.bias"], 0),
        ];
        for (path, at) in cases {
            let mut bad_file = file.clone();
            perturb(&mut bad_file, &path, at);
            let bad = check(&bad_file);
            let what = path.join(".");
            assert!(
                bad.len() == 1 && bad[0].starts_with(&format!("{what}[{at}]")),
                "{name}: a perturbed {what}[{at}] is caught alone, got {bad:?}"
            );
        }
    }
}

/// A large batch split over threads gives the features of the one-thread run exactly and its
/// gradients within rounding; gradients accumulate over calls.
#[test]
fn threads_and_accumulation_agree() {
    for (name, file) in reference_files() {
        let (mut enc, obs, frames) = encoder_of(&file);
        let copies = 64;
        let obs: Vec<u8> = obs.repeat(copies);
        let n = frames * copies;
        let g: Vec<f32> = floats(&file["grad_features"]).1.repeat(copies);
        let run = |enc: &mut Encoder| {
            let mut tape = Tape::default();
            let f = enc.forward_train(&obs, n, &mut tape).unwrap().to_vec();
            let mut grads = EncoderGrads::zeros(enc);
            enc.backward(&tape, &g, &mut grads).unwrap();
            (f, grads)
        };
        let (f1, g1) = fused::single_threaded(|| run(&mut enc));
        let (f2, g2) = run(&mut enc);
        assert_eq!(f1, f2, "{name}: features do not depend on the split");
        // Every copy's features are the reference's (each frame is computed, whatever its
        // sub-batch and thread).
        let want = floats(&file["features_out"]).1;
        for (j, copy) in f2.chunks_exact(want.len()).enumerate() {
            assert_eq!(mismatch(&format!("copy {j}"), copy, &want), None, "{name}");
        }
        // The copies' gradient is `copies` times the reference's, accumulated twice = 2x.
        let mut twice = EncoderGrads::zeros(&enc);
        let mut tape = Tape::default();
        enc.forward_train(&obs, n, &mut tape).unwrap();
        enc.backward(&tape, &g, &mut twice).unwrap();
        enc.backward(&tape, &g, &mut twice).unwrap();
        let want = file["grads"].as_object().unwrap();
        for (((pname, a), (_, b)), (_, t)) in g1.iter().zip(g2.iter()).zip(twice.iter()) {
            let r: Vec<f32> = floats(&want[pname]).1;
            for i in 0..a.len() {
                let scale = r[i].abs().max(1.0) * copies as f32;
                assert!((a[i] - b[i]).abs() <= 1e-5 * scale, "{name} {pname}[{i}]");
                assert!(
                    (a[i] - copies as f32 * r[i]).abs() <= 2e-5 * scale,
                    "{name} {pname}[{i}]"
                );
                assert!(
                    (t[i] - 2.0 * b[i]).abs() <= 1e-5 * scale,
                    "{name} {pname}[{i}]"
                );
            }
        }
    }
}

#[test]
fn calls_refuse_wrong_lengths_and_stale_tapes() {
    let mut enc = Encoder::new(&EncoderConfig::minigrid(), ImageShape::new(7, 7, 3), 3).unwrap();
    let err = enc.forward(&[0; 10], 1).unwrap_err().to_string();
    assert!(
        err.contains("obs") && err.contains("10") && err.contains("147"),
        "{err}"
    );
    let mut tape = Tape::default();
    enc.forward_train(&[1; 2 * 147], 2, &mut tape).unwrap();
    let mut grads = EncoderGrads::zeros(&enc);
    let err = enc
        .backward(&tape, &[0.0; 3], &mut grads)
        .unwrap_err()
        .to_string();
    assert!(err.contains("grad_features") && err.contains('3'), "{err}");
    let w = vec![0.5; 16];
    enc.set_param("convs.0.bias", &w).unwrap();
    let err = enc
        .backward(&tape, &[0.0; 256], &mut grads)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tape"), "{err}");
    let err = enc.set_param("convs.1.weight", &w).unwrap_err().to_string();
    assert!(
        err.contains("convs.1.weight") && err.contains("no such"),
        "{err}"
    );
    let err = enc
        .set_param("convs.0.bias", &[0.0; 3])
        .unwrap_err()
        .to_string();
    assert!(err.contains("convs.0.bias") && err.contains('3'), "{err}");
}

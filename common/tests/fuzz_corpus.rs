//! The fuzz targets' corpus and every crash a fuzzer found, replayed through the same entry
//! points (`common/src/fuzz.rs`) on the stable toolchain: a decoder that panics on any of them
//! fails here. `scripts/fuzz.sh` grows `fuzz/corpus/`; crashes go to `fuzz/regressions/` with
//! their fix.

use std::path::PathBuf;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

#[test]
fn every_target_replays_its_seed_corpus_without_a_panic() {
    let read = common::fuzz::replay(&fuzz_dir().join("corpus"));
    let empty: Vec<&str> = read
        .iter()
        .filter(|(_, n)| *n == 0)
        .map(|(t, _)| *t)
        .collect();
    assert!(
        empty.is_empty(),
        "fuzz/corpus has no seed for {empty:?} (regenerate with `cargo run -p recur-common \
         --example fuzz_seeds -- fuzz/corpus RUN_DIR`)"
    );
}

#[test]
fn crashes_found_by_the_fuzzers_stay_fixed() {
    // fuzz/regressions/<target>/ holds every input a fuzzer crashed on (none is an empty set).
    common::fuzz::replay(&fuzz_dir().join("regressions"));
}

#[test]
fn a_corrupted_seed_is_still_answered_with_an_error() {
    // Flip each byte of a real chunk in turn: every variant decodes or errs, none panics, and
    // a payload byte flipped is caught by the checksum.
    let dir = fuzz_dir().join("corpus/chunk");
    let seed = std::fs::read(dir.join("MaskedCartPole-v1")).expect("the chunk seed");
    let (meta, payload_at) = common::chunk::Chunk::peek_meta(&seed).expect("a real chunk");
    assert_eq!(payload_at as u64 + meta.payload_len, seed.len() as u64);
    for i in 0..seed.len() {
        let mut bytes = seed.clone();
        bytes[i] ^= 0x5a;
        common::fuzz::chunk(&bytes);
        if i >= payload_at {
            assert!(
                common::chunk::Chunk::verify_checksum(&bytes).is_err(),
                "payload byte {i} flipped and the checksum still matches"
            );
        }
    }
}

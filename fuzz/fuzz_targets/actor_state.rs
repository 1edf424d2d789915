#![no_main]
// common::fuzz::actor_state: see common/src/fuzz.rs for the decoder and where its bytes come from.
libfuzzer_sys::fuzz_target!(|data: &[u8]| common::fuzz::actor_state(data));

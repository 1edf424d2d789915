//! The shared-memory transport in one process: rings (order, integrity, back-pressure,
//! timeouts, peers that vanish, writers that die mid-write, corrupted slots, arbitrary slot
//! contents), the weight double buffer under concurrent publishing, and segment lifecycle
//! (mode 0600, unlink on drop and on panic, stale-segment reclaim).
//!
//! Corruption is injected the way another process would cause it: by writing into the
//! segment's file in /dev/shm (same pages as the mappings).

use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use common::chunk::{ActionColumn, ActionKind, Chunk, ChunkMeta, ChunkSchema, PREFIX_LEN};
use common::shm::segment::{HEADER_LEN, OWNER_PID_OFFSET, OWNER_START_OFFSET};
use common::shm::{
    reclaim_stale, unique_run_id, PushOutcome, RingConfig, RingError, RingReader, RingWriter,
    Segment, ShmError, WeightPublisher, WeightSubscriber, SEGMENT_PREFIX,
};
use proptest::prelude::*;
use recur_rnn::CellKind;

/// A pid above any pid_max: never a live process.
const DEAD_PID: u32 = i32::MAX as u32;

fn seg_name(tag: &str) -> String {
    format!("{SEGMENT_PREFIX}test-{}-{tag}", unique_run_id())
}

fn shm_path(name: &str) -> PathBuf {
    PathBuf::from("/dev/shm").join(name)
}

/// Writes `bytes` at `offset` of segment `name`, as another process could.
fn poke(name: &str, offset: usize, bytes: &[u8]) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(shm_path(name))
        .unwrap();
    file.write_all_at(bytes, offset as u64).unwrap();
}

fn peek(name: &str, offset: usize, len: usize) -> Vec<u8> {
    let file = std::fs::File::open(shm_path(name)).unwrap();
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, offset as u64).unwrap();
    buf
}

fn schemas() -> Vec<ChunkSchema> {
    let s = |envs, steps, obs_dim, action, cell, hidden_size| ChunkSchema {
        envs,
        steps,
        obs_dim,
        action,
        cell,
        num_layers: 1,
        hidden_size,
        images: Vec::new(),
    };
    vec![
        s(1, 2, 1, ActionKind::Discrete, CellKind::Gru, 2),
        s(
            4,
            8,
            3,
            ActionKind::Continuous { dim: 2 },
            CellKind::Lstm,
            8,
        ),
        s(2, 16, 5, ActionKind::Discrete, CellKind::Lstm, 4),
        // ~70 KiB: several copy/checksum blocks.
        s(8, 32, 4, ActionKind::Discrete, CellKind::Lstm, 32),
    ]
}

/// Chunk `i` of the test stream: schema `i % 4`, values derived from `i`.
fn chunk(i: u64, schemas: &[ChunkSchema]) -> (ChunkSchema, Chunk, Vec<u8>) {
    let schema = schemas[(i % schemas.len() as u64) as usize].clone();
    let meta = ChunkMeta {
        actor_id: 3,
        incarnation: 1,
        seq: i,
        policy_version: i / 10,
        schema_hash: 0,
        envs: 0,
        steps: 0,
        payload_len: 0,
        payload_crc32: 0,
    };
    let mut c = Chunk::zeros(&schema, meta);
    let n = c.observation.len();
    for (k, x) in c.observation.iter_mut().enumerate() {
        *x = (i as f32) + k as f32 / n as f32;
    }
    c.next_reward.iter_mut().for_each(|r| *r = -(i as f32));
    c.rs_h.iter_mut().step_by(3).for_each(|h| *h = 0.5);
    c.is_init[0] = 1;
    c.traj_ids.iter_mut().for_each(|t| *t = i as i64 * 7);
    if let ActionColumn::Discrete(a) = &mut c.action {
        a[0] = i as i64 % 5;
    }
    let encoded = c.encode(&schema).unwrap();
    let c = Chunk::decode(&encoded, &schema).unwrap(); // meta filled in by encode
    (schema, c, encoded)
}

fn max_encoded_len(schemas: &[ChunkSchema]) -> usize {
    (0..schemas.len() as u64)
        .map(|i| chunk(i, schemas).2.len())
        .max()
        .unwrap()
}

/// Polls `cond` every millisecond for up to 20 s.
fn wait_until(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not reached in 20 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn never_gone() -> impl FnMut() -> bool {
    || true
}

#[test]
fn ring_delivers_every_chunk_once_in_order_and_intact() {
    const N: u64 = 2000;
    let schemas = schemas();
    let name = seg_name("order");
    let mut reader = RingReader::create(
        &name,
        RingConfig {
            slots: 4,
            slot_bytes: max_encoded_len(&schemas),
        },
    )
    .unwrap();
    let writer = {
        let (name, schemas) = (name.clone(), schemas.clone());
        std::thread::spawn(move || {
            let mut w = RingWriter::open(&name).unwrap();
            let mut waited = Duration::ZERO;
            for i in 0..N {
                let (_, _, bytes) = chunk(i, &schemas);
                let PushOutcome::Pushed { waited: w_i } = w
                    .push(&bytes, Duration::from_secs(20), &mut never_gone())
                    .unwrap();
                waited += w_i;
            }
            (w.full_waits(), waited)
        })
    };
    // Let the writer fill the ring first: it must wait, not drop.
    wait_until(|| reader.stats().writer_full_waits >= 1);
    let mut out = Vec::new();
    let mut next = 0u64;
    let mut bytes = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < N {
        assert!(Instant::now() < deadline, "stalled at chunk {next}");
        match reader.try_recv(&mut out).unwrap() {
            Some(len) => {
                let (schema, expected, encoded) = chunk(next, &schemas);
                assert_eq!(&out[..len], &encoded[..], "chunk {next} bytes");
                let got = Chunk::decode_verified(&out[..len], &schema).unwrap();
                assert_eq!(got, expected, "chunk {next}");
                bytes += len as u64;
                next += 1;
            }
            None => std::thread::yield_now(),
        }
    }
    let (full_waits, waited) = writer.join().unwrap();
    assert_eq!(reader.try_recv(&mut out), Ok(None), "nothing extra");
    let stats = reader.stats();
    assert_eq!(
        (stats.received, stats.corrupted, stats.bytes),
        (N, 0, bytes)
    );
    assert!(full_waits >= 1, "the writer found the ring full");
    assert!(waited > Duration::ZERO, "{waited:?}");
    assert_eq!(stats.writer_full_waits, full_waits);
    assert!(!reader.abandoned_slot());
}

#[test]
fn a_full_ring_blocks_counts_and_times_out() {
    let schemas = schemas();
    let (_, _, bytes) = chunk(0, &schemas);
    let name = seg_name("full");
    let mut reader = RingReader::create(
        &name,
        RingConfig {
            slots: 2,
            slot_bytes: bytes.len(),
        },
    )
    .unwrap();
    let mut w = RingWriter::open(&name).unwrap();
    assert_eq!(w.capacity(), bytes.len());
    for _ in 0..2 {
        let outcome = w.push(&bytes, Duration::ZERO, &mut never_gone()).unwrap();
        assert_eq!(outcome.waited(), Duration::ZERO);
    }
    assert_eq!(w.full_waits(), 0);
    let start = Instant::now();
    let err = w
        .push(&bytes, Duration::from_millis(30), &mut never_gone())
        .unwrap_err();
    assert!(matches!(err, RingError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert_eq!(w.full_waits(), 1);
    // Nothing was dropped or overwritten: both chunks are still there, in order.
    let mut out = Vec::new();
    assert!(reader.try_recv(&mut out).unwrap().is_some());
    // A blocked push completes as soon as the reader frees a slot.
    let freer = std::thread::spawn(move || {
        // Once the writer waits (its second full ring), keep it waiting a while.
        wait_until(|| reader.stats().writer_full_waits == 2);
        std::thread::sleep(Duration::from_millis(40));
        let mut out = Vec::new();
        assert!(reader.try_recv(&mut out).unwrap().is_some());
        reader
    });
    w.push(&bytes, Duration::ZERO, &mut never_gone()).unwrap();
    let outcome = w
        .push(&bytes, Duration::from_secs(10), &mut never_gone())
        .unwrap();
    assert!(outcome.waited() >= Duration::from_millis(30), "{outcome:?}");
    assert_eq!(w.full_waits(), 2);
    let mut reader = freer.join().unwrap();
    assert_eq!(reader.stats().writer_full_waits, 2);
    let mut n = 0;
    while reader.try_recv(&mut out).unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 2);
    assert_eq!(reader.stats().received, 4);
}

#[test]
fn a_writer_gives_up_when_its_peer_is_gone() {
    let name = seg_name("gone");
    let schemas = schemas();
    let (_, _, bytes) = chunk(0, &schemas);
    let reader = RingReader::create(
        &name,
        RingConfig {
            slots: 1,
            slot_bytes: bytes.len(),
        },
    )
    .unwrap();
    let mut w = RingWriter::open(&name).unwrap();
    w.push(&bytes, Duration::ZERO, &mut never_gone()).unwrap();
    // alive() says the learner is gone (e.g. the control connection dropped).
    let mut calls = 0;
    let start = Instant::now();
    let err = w
        .push(&bytes, Duration::from_secs(30), &mut || {
            calls += 1;
            false
        })
        .unwrap_err();
    assert_eq!(err, RingError::PeerGone);
    assert_eq!(calls, 1);
    assert!(start.elapsed() < Duration::from_secs(2));
    // The learner process (the segment owner) is dead: noticed without help from alive().
    assert!(w.owner_alive());
    poke(&name, OWNER_PID_OFFSET, &DEAD_PID.to_ne_bytes());
    assert!(!w.owner_alive());
    let err = w
        .push(&bytes, Duration::from_secs(30), &mut never_gone())
        .unwrap_err();
    assert_eq!(err, RingError::PeerGone);
    assert!(start.elapsed() < Duration::from_secs(3));
    drop(reader);
    assert!(!shm_path(&name).exists(), "the owner's drop unlinks");

    // The learner dropped the ring (e.g. it gave up on this actor): no more pushes.
    let name = seg_name("dropped");
    let reader = RingReader::create(
        &name,
        RingConfig {
            slots: 4,
            slot_bytes: bytes.len(),
        },
    )
    .unwrap();
    let mut w = RingWriter::open(&name).unwrap();
    w.push(&bytes, Duration::ZERO, &mut never_gone()).unwrap();
    drop(reader);
    assert!(!w.owner_alive());
    let err = w
        .push(&bytes, Duration::from_secs(30), &mut never_gone())
        .unwrap_err();
    assert_eq!(err, RingError::PeerGone);
}

#[test]
fn oversized_chunks_are_refused_not_truncated() {
    let name = seg_name("large");
    let mut reader = RingReader::create(
        &name,
        RingConfig {
            slots: 2,
            slot_bytes: 100,
        },
    )
    .unwrap();
    let mut w = RingWriter::open(&name).unwrap();
    let err = w
        .push(&[0; 101], Duration::ZERO, &mut never_gone())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("ring {name:?}: a chunk of 101 bytes exceeds the slot capacity of 100 bytes")
    );
    assert_eq!(reader.try_recv(&mut Vec::new()), Ok(None));
}

/// Where a corruption is written: at an offset into the slot's data, or over its length word.
enum At {
    Data(usize),
    LenWord,
}

#[test]
fn corrupted_slots_are_reported_counted_and_skipped() {
    let schemas = schemas();
    let s1 = &schemas[1..2];
    let (_, _, good) = chunk(0, s1);
    let glen = good.len() as u64;
    let name = seg_name("corrupt");
    let mut reader = RingReader::create(
        &name,
        RingConfig {
            slots: 3,
            slot_bytes: good.len() + 64,
        },
    )
    .unwrap();
    let mut w = RingWriter::open(&name).unwrap();
    // The header's payload_len field: prefix, then actor_id, incarnation (u32), seq,
    // policy_version, schema_hash (u64), envs, steps (u32).
    let payload_len_at = PREFIX_LEN + 4 + 4 + 8 + 8 + 8 + 4 + 4;
    let (meta, _) = Chunk::peek_meta(&good).unwrap();
    assert_eq!(
        good[payload_len_at..payload_len_at + 8],
        meta.payload_len.to_le_bytes()
    );
    let last = good.len() - 1;
    // (expected words of the reason, where, bytes written, whether the chunk seq is known)
    let cases: Vec<(&str, At, Vec<u8>, bool)> = vec![
        ("bad magic", At::Data(0), b"XECURCK1".to_vec(), false),
        (
            "layout version",
            At::Data(8),
            7u32.to_le_bytes().to_vec(),
            false,
        ),
        (
            "header",
            At::Data(12),
            u32::MAX.to_le_bytes().to_vec(),
            false,
        ),
        (
            "payload_len",
            At::Data(payload_len_at),
            (meta.payload_len + 1).to_le_bytes().to_vec(),
            true,
        ),
        ("crc32", At::Data(last), vec![good[last] ^ 0x5a], true),
        // The length word: beyond the slot, one short, shorter than a prefix. (One long is an
        // actor-state trailer of one byte: the ring hands it over, `split_state` refuses it.)
        (
            "exceeds the slot capacity",
            At::LenWord,
            (glen + 65).to_ne_bytes().to_vec(),
            false,
        ),
        (
            "exceeds the slot capacity",
            At::LenWord,
            u64::MAX.to_ne_bytes().to_vec(),
            false,
        ),
        (
            "> slot length",
            At::LenWord,
            (glen - 1).to_ne_bytes().to_vec(),
            true,
        ),
        (
            "shorter than a chunk prefix",
            At::LenWord,
            3u64.to_ne_bytes().to_vec(),
            false,
        ),
    ];
    let mut out = Vec::new();
    for (k, (want, at, bytes, seq_known)) in cases.iter().enumerate() {
        let seq = 2 * k as u64;
        let slot = reader.next_slot();
        let offsets = reader.slot_offsets(slot);
        w.push(&chunk(seq, s1).2, Duration::ZERO, &mut never_gone())
            .unwrap();
        let offset = match at {
            At::Data(d) => offsets.data + d,
            At::LenWord => offsets.len,
        };
        poke(&name, offset, bytes);
        let (_, expected, next) = chunk(seq + 1, s1);
        w.push(&next, Duration::ZERO, &mut never_gone()).unwrap();
        match reader.try_recv(&mut out) {
            Err(RingError::Corrupt {
                ring,
                slot: s,
                seq: got_seq,
                reason,
            }) => {
                assert_eq!(ring, name);
                assert_eq!(s, slot);
                assert!(reason.contains(want), "{want:?} not in {reason:?}");
                assert_eq!(got_seq, seq_known.then_some(seq), "{reason}");
            }
            other => panic!("{want}: expected Corrupt, got {other:?}"),
        }
        // The next chunk arrives intact.
        let len = reader.try_recv(&mut out).unwrap().expect("next chunk");
        assert_eq!(
            Chunk::decode_verified(&out[..len], &s1[0]).unwrap(),
            expected
        );
    }
    // A length word one byte long: the ring delivers the chunk and one byte after it, which
    // is no actor-state trailer.
    let seq = 2 * cases.len() as u64;
    let offsets = reader.slot_offsets(reader.next_slot());
    w.push(&chunk(seq, s1).2, Duration::ZERO, &mut never_gone())
        .unwrap();
    poke(&name, offsets.len, &(glen + 1).to_ne_bytes());
    let len = reader
        .try_recv(&mut out)
        .unwrap()
        .expect("the chunk and a byte");
    assert_eq!(len as u64, glen + 1);
    let err = Chunk::split_state(&out[..len]).unwrap_err().to_string();
    assert!(err.contains("trailer"), "{err}");
    let stats = reader.stats();
    assert_eq!(stats.corrupted, cases.len() as u64);
    assert_eq!(stats.received, cases.len() as u64 + 1);
    assert_eq!(reader.try_recv(&mut out), Ok(None));
}

#[test]
fn a_writer_dying_mid_write_costs_only_that_chunk() {
    let schemas = schemas();
    let name = seg_name("crash");
    let mut reader = RingReader::create(
        &name,
        RingConfig {
            slots: 8,
            slot_bytes: max_encoded_len(&schemas),
        },
    )
    .unwrap();
    let mut w = RingWriter::open(&name).unwrap();
    for i in 0..3 {
        w.push(&chunk(i, &schemas).2, Duration::ZERO, &mut never_gone())
            .unwrap();
    }
    let (_, _, half) = chunk(3, &schemas);
    w.crash_mid_write(&half, half.len() / 2);
    // The learner drains every complete chunk, then learns that one was half written.
    let mut out = Vec::new();
    for i in 0..3 {
        let len = reader.try_recv(&mut out).unwrap().expect("complete chunk");
        assert_eq!(&out[..len], &chunk(i, &schemas).2[..]);
    }
    assert_eq!(reader.try_recv(&mut out), Ok(None));
    assert!(reader.abandoned_slot());
    assert_eq!(reader.stats().corrupted, 0);
    // The dead writer's claim stays: a restarted actor gets a new ring.
    assert_eq!(reader.writer_pid(), Some(std::process::id()));
    let err = RingWriter::open(&name).unwrap_err();
    assert!(matches!(err, ShmError::WriterAttached { .. }), "{err}");

    // A writer that stops between chunks leaves nothing half written.
    let name = seg_name("clean-stop");
    let mut reader = RingReader::create(
        &name,
        RingConfig {
            slots: 2,
            slot_bytes: 64,
        },
    )
    .unwrap();
    assert_eq!(reader.writer_pid(), None);
    assert!(!reader.writer_alive());
    drop(RingWriter::open(&name).unwrap());
    assert_eq!(reader.try_recv(&mut out), Ok(None));
    assert!(!reader.abandoned_slot());
}

#[test]
fn ring_layouts_from_shared_memory_are_validated() {
    let name = seg_name("layout");
    let _reader = RingReader::create(
        &name,
        RingConfig {
            slots: 2,
            slot_bytes: 64,
        },
    )
    .unwrap();
    // The slot count word at the start of the ring header.
    let slots_at = HEADER_LEN;
    for (value, want) in [
        (0u64, "at least one slot"),
        (1_000_000, "body bytes"),
        (u64::MAX, "slots"),
    ] {
        poke(&name, slots_at, &value.to_ne_bytes());
        let err = RingWriter::open(&name).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&name) && text.contains(want), "{text}");
    }
    poke(&name, slots_at, &2u64.to_ne_bytes());
    RingWriter::open(&name).unwrap();
    // A weights segment is not a ring, and the other way round.
    let wname = seg_name("kind");
    let _p = WeightPublisher::create(&wname, 8).unwrap();
    let err = RingWriter::open(&wname).unwrap_err();
    assert!(
        err.to_string()
            .contains("1 (ring); this is a weights segment"),
        "{err}"
    );
    let err = WeightSubscriber::open(&name).unwrap_err();
    assert!(
        err.to_string()
            .contains("2 (weights); this is a ring segment"),
        "{err}"
    );
}

/// How a proptest case fills a slot.
#[derive(Clone, Debug)]
enum SlotContent {
    Random(Vec<u8>),
    /// A valid chunk with bytes xor-ed at positions (modulo its length), maybe truncated.
    Mutated(Vec<(usize, u8)>, Option<usize>),
}

fn slot_content() -> impl Strategy<Value = SlotContent> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..=600).prop_map(SlotContent::Random),
        (
            proptest::collection::vec((any::<usize>(), 1..=255u8), 1..6),
            proptest::option::of(0..600usize)
        )
            .prop_map(|(m, t)| SlotContent::Mutated(m, t)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Whatever a slot holds (and whatever its length word says), try_recv returns a verified
    /// chunk or Corrupt, never panics, never reads past the slot, and the ring keeps going.
    #[test]
    fn try_recv_survives_arbitrary_slot_contents(
        content in slot_content(),
        len_word in proptest::option::of(prop_oneof![0..700u64, any::<u64>()]),
    ) {
        let schemas = schemas();
        let (_, valid_chunk, valid) = chunk(5, &schemas[..1]);
        let bytes = match content {
            SlotContent::Random(b) => b,
            SlotContent::Mutated(flips, truncate) => {
                let mut b = valid.clone();
                for (at, x) in flips {
                    let n = b.len();
                    b[at % n] ^= x;
                }
                if let Some(t) = truncate {
                    b.truncate(t);
                }
                b
            }
        };
        let name = seg_name("prop");
        let slot_bytes = 640;
        let mut reader = RingReader::create(&name, RingConfig { slots: 2, slot_bytes }).unwrap();
        let mut w = RingWriter::open(&name).unwrap();
        w.push(&bytes, Duration::ZERO, &mut never_gone()).unwrap();
        if let Some(len) = len_word {
            poke(&name, reader.slot_offsets(0).len, &len.to_ne_bytes());
        }
        let mut out = vec![1, 2, 3];
        match reader.try_recv(&mut out) {
            Ok(Some(len)) => {
                prop_assert!(len <= slot_bytes);
                prop_assert_eq!(out.len(), len);
                prop_assert!(Chunk::verify_checksum(&out).is_ok());
                if len_word.is_none() {
                    prop_assert_eq!(&out[..], &bytes[..]);
                }
            }
            Ok(None) => prop_assert!(false, "a published slot must be consumed"),
            Err(RingError::Corrupt { slot, .. }) => {
                prop_assert_eq!(slot, 0);
                prop_assert!(out.is_empty());
            }
            Err(other) => prop_assert!(false, "unexpected {other}"),
        }
        // The ring goes on.
        w.push(&valid, Duration::ZERO, &mut never_gone()).unwrap();
        let len = reader.try_recv(&mut out).unwrap().unwrap();
        prop_assert_eq!(Chunk::decode_verified(&out[..len], &schemas[0]).unwrap(), valid_chunk);
        let stats = reader.stats();
        prop_assert_eq!(stats.received + stats.corrupted, 2);
    }
}

/// Blob of version `v`: a length that varies with `v`, every u32 word equal to `v`.
fn blob(v: u64) -> Vec<u8> {
    let words = 1000 + (v % 7) as usize * 500;
    (0..words).flat_map(|_| (v as u32).to_le_bytes()).collect()
}

fn check_blob(v: u64, bytes: &[u8]) {
    assert_eq!(bytes.len(), blob(v).len(), "version {v}: length");
    for (k, w) in bytes.chunks_exact(4).enumerate() {
        let got = u32::from_le_bytes(w.try_into().unwrap());
        assert_eq!(got, v as u32, "version {v}: word {k} is from version {got}");
    }
}

#[test]
fn weights_fetched_under_concurrent_publishing_are_never_torn() {
    let name = seg_name("weights");
    let max = blob(6).len();
    let mut publisher = WeightPublisher::create(&name, max).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut v = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && v < 1_000_000 {
                v += 1;
                publisher.publish(v, &blob(v)).unwrap();
            }
            (publisher, v)
        })
    };
    // The subscriber has its own mapping of the segment, as an actor process would.
    let mut sub = WeightSubscriber::open(&name).unwrap();
    assert_eq!(sub.max_bytes(), max);
    assert!(sub.owner_alive());
    let (mut have, mut fetched) = (0u64, 0u32);
    let mut out = Vec::new();
    let start = Instant::now();
    while fetched < 300 && !writer.is_finished() && start.elapsed() < Duration::from_secs(10) {
        let latest = sub.latest_version();
        assert!(
            latest >= have,
            "latest_version went back: {latest} < {have}"
        );
        match sub.fetch_newer(have, &mut out) {
            Ok(Some(v)) => {
                assert!(v > have, "fetched {v} after {have}");
                check_blob(v, &out);
                have = v;
                fetched += 1;
            }
            Ok(None) => {}
            // A publisher hammering without pause can outrun every copy; that is reported,
            // never returned as a torn blob.
            Err(ShmError::Contended { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (publisher, last) = writer.join().unwrap();
    assert!(fetched >= 10, "only {fetched} fetches");
    // The final version is what a late subscriber gets.
    if let Some(v) = sub.fetch_newer(have, &mut out).unwrap() {
        assert_eq!(v, last);
        check_blob(v, &out);
    }
    assert_eq!(sub.latest_version(), last);
    assert_eq!(sub.fetch_newer(last, &mut out).unwrap(), None);
    drop(publisher);
    assert!(!shm_path(&name).exists());
}

#[test]
fn weight_lengths_from_shared_memory_are_validated() {
    let name = seg_name("wlen");
    let mut p = WeightPublisher::create(&name, 64).unwrap();
    p.publish(1, &[9; 64]).unwrap();
    let mut sub = WeightSubscriber::open(&name).unwrap();
    // Version 1 went to buffer 0.
    poke(&name, sub.length_offset(0), &65u64.to_ne_bytes());
    let err = sub.fetch_newer(0, &mut Vec::new()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&name) && text.contains("weights length") && text.contains("65"),
        "{text}"
    );
    p.publish(2, &[7; 10]).unwrap();
    let mut out = Vec::new();
    assert_eq!(sub.fetch_newer(0, &mut out).unwrap(), Some(2));
    assert_eq!(out, vec![7; 10]);
}

#[test]
fn segments_are_private_and_removed_by_their_owner() {
    let name = seg_name("life");
    let seg = Segment::create(&name, 1000).unwrap();
    let meta = std::fs::metadata(shm_path(&name)).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), (HEADER_LEN + 1000) as u64);
    assert_eq!(seg.body_len(), 1000);
    assert!(seg.is_owner());
    assert_eq!(seg.owner_pid(), std::process::id());
    assert!(seg.owner_alive());
    let err = Segment::create(&name, 1000).unwrap_err();
    assert!(matches!(err, ShmError::Exists { .. }) && err.to_string().contains(&name));
    let opened = Segment::open(&name).unwrap();
    assert!(!opened.is_owner());
    assert_eq!(opened.owner_pid(), std::process::id());
    assert_eq!(opened.len(), HEADER_LEN + 1000);
    drop(opened);
    assert!(shm_path(&name).exists(), "an opener's drop does not unlink");
    drop(seg);
    assert!(!shm_path(&name).exists());
    let err = Segment::open(&name).unwrap_err();
    assert!(matches!(err, ShmError::NotFound { .. }));
    assert!(
        err.to_string()
            .contains(&format!("{name:?} does not exist")),
        "{err}"
    );
    let err = Segment::create("not-recur", 8).unwrap_err();
    assert!(err.to_string().contains("\"not-recur\""), "{err}");

    // Unwinding from a panic drops (and unlinks) the segment too.
    let name = seg_name("panic");
    let n = name.clone();
    let result = std::panic::catch_unwind(move || {
        let _seg = Segment::create(&n, 64).unwrap();
        assert!(shm_path(&n).exists());
        panic!("boom");
    });
    assert!(result.is_err());
    assert!(!shm_path(&name).exists());
}

#[test]
fn opening_checks_the_header() {
    let name = seg_name("hdr");
    let _seg = Segment::create(&name, 64).unwrap();
    let magic = peek(&name, 0, 8);
    poke(&name, 0, b"NOTRECUR");
    let err = Segment::open(&name).unwrap_err();
    assert!(err.to_string().contains("is not recur's"), "{err}");
    poke(&name, 0, &magic);
    poke(&name, 8, &99u32.to_ne_bytes());
    let err = Segment::open(&name).unwrap_err();
    assert!(err.to_string().contains("`layout version` = 99"), "{err}");
    poke(&name, 8, &1u32.to_ne_bytes());
    poke(&name, 32, &12345u64.to_ne_bytes());
    let err = Segment::open(&name).unwrap_err();
    assert!(err.to_string().contains("`total size` = 12345"), "{err}");
}

#[test]
fn reclaim_stale_removes_dead_owners_segments_only() {
    // A segment whose owner died, one whose pid was reused by a later process, a live one.
    let dead = seg_name("dead");
    let reused = seg_name("reused");
    let live = seg_name("live");
    let dead_seg = Segment::create(&dead, 64).unwrap();
    let reused_seg = Segment::create(&reused, 64).unwrap();
    let live_seg = Segment::create(&live, 64).unwrap();
    poke(&dead, OWNER_PID_OFFSET, &DEAD_PID.to_ne_bytes());
    let start = u64::from_ne_bytes(peek(&reused, OWNER_START_OFFSET, 8).try_into().unwrap());
    poke(&reused, OWNER_START_OFFSET, &(start + 1).to_ne_bytes());
    assert!(!dead_seg.owner_alive());
    assert!(!reused_seg.owner_alive());
    // Debris without a header: old is reclaimed, fresh (maybe being created) is not.
    let old_junk = seg_name("junk-old");
    let new_junk = seg_name("junk-new");
    for junk in [&old_junk, &new_junk] {
        std::fs::write(shm_path(junk), b"partial").unwrap();
    }
    let f = std::fs::File::options()
        .write(true)
        .open(shm_path(&old_junk))
        .unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(f);

    let removed = reclaim_stale();
    // Another test process may reclaim concurrently: judge by what is left.
    for gone in [&dead, &reused, &old_junk] {
        assert!(
            !shm_path(gone).exists(),
            "{gone} should be reclaimed ({removed:?})"
        );
    }
    for kept in [&live, &new_junk] {
        assert!(shm_path(kept).exists(), "{kept} must stay");
        assert!(!removed.contains(kept));
    }
    std::fs::remove_file(shm_path(&new_junk)).unwrap();
    // Dropping the reclaimed owners' handles is harmless.
    drop((dead_seg, reused_seg));
    drop(live_seg);
    assert!(!shm_path(&live).exists());
}

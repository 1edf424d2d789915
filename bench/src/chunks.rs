//! The chunks the transport benchmarks send: real encoded chunks of a nominal size (valid
//! checksums, non-trivial values), and their sequence numbers set in place.

use anyhow::ensure;
use common::chunk::{ActionKind, Chunk, ChunkMeta, ChunkSchema, PREFIX_LEN};
use recur_rnn::CellKind;

/// The schema of the benchmark's chunks: GRU, discrete actions, 16 envs, about 1 KiB per
/// frame, `chunk_bytes / 1024` frames.
pub fn bench_schema(chunk_bytes: usize) -> anyhow::Result<ChunkSchema> {
    ensure!(
        chunk_bytes >= 16 << 10,
        "--chunk-sizes: {chunk_bytes} bytes is too small (at least 16K)"
    );
    let obs_dim = 4;
    // Bytes per frame of a GRU/discrete chunk: 8 * obs_dim (observation, next observation)
    // + 32 (action, log-prob, value, is_init, reward, 3 flags, traj id) + 4 * hidden.
    let fixed = 8 * obs_dim + 32;
    Ok(ChunkSchema {
        envs: 16,
        steps: (chunk_bytes / 1024 / 16).max(1),
        obs_dim,
        action: ActionKind::Discrete,
        cell: CellKind::Gru,
        num_layers: 1,
        hidden_size: (1024 - fixed - 4) / 4,
        images: Vec::new(),
    })
}

/// One encoded chunk of about `chunk_bytes` (valid checksum), with non-trivial values.
pub fn bench_chunk(chunk_bytes: usize) -> anyhow::Result<Vec<u8>> {
    let schema = bench_schema(chunk_bytes)?;
    let mut chunk = Chunk::zeros(&schema, ChunkMeta::new(0, 0, 0, 1));
    for (i, x) in chunk.observation.iter_mut().enumerate() {
        *x = (i % 97) as f32 * 0.25;
    }
    for (i, x) in chunk.rs_h.iter_mut().enumerate() {
        *x = ((i % 13) as f32 - 6.0) / 7.0;
    }
    for (i, x) in chunk.next_reward.iter_mut().enumerate() {
        *x = (i % 5) as f32;
    }
    Ok(chunk.encode(&schema)?)
}

/// Offset of `seq` in an encoded chunk: after the prefix, `actor_id` and `incarnation` (u32
/// each) of the fixed-width little-endian header.
const SEQ_OFFSET: usize = PREFIX_LEN + 8;

/// Sets the sequence number of an encoded chunk in place (the checksum covers the payload
/// only, so the chunk stays valid).
pub fn set_seq(encoded: &mut [u8], seq: u64) {
    encoded[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_chunks_are_close_to_the_nominal_size_and_valid() {
        for size in [64 << 10, 1 << 20] {
            let mut encoded = bench_chunk(size).unwrap();
            assert!(
                encoded.len() <= size && encoded.len() * 100 >= size * 99,
                "{size}: {}",
                encoded.len()
            );
            set_seq(&mut encoded, 12345);
            let meta = Chunk::verify_checksum(&encoded).unwrap();
            assert_eq!(meta.seq, 12345);
        }
    }
}

//! FNV-1a (64-bit): the stable hash of a chunk schema and of a weight blob's layout.

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over `bytes`.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes
        .into_iter()
        .fold(OFFSET_BASIS, |h, b| (h ^ b as u64).wrapping_mul(PRIME))
}

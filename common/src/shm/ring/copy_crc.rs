//! Copy out of a slot fused with the CRC-32 (IEEE) of the bytes copied.
//!
//! With AVX-512 + VPCLMULQDQ (or AVX2 + VPCLMULQDQ) one pass loads each 64-byte (32-byte)
//! block once, stores it to the destination and folds it into 16 (8) independent CRC
//! streams, so the checksum costs almost nothing over the copy. The streams are folded
//! together with the constants of crc32fast's kernels (the "fast CRC computation using
//! PCLMULQDQ" folding: for a distance of D bits the pair `x^(D+32)`, `x^(D-32)` mod P,
//! bit-reflected), and the remaining 128-bit value, which behaves as a 16-byte message
//! processed from a zero register, is finished by crc32fast. Other CPUs (and the tail) copy
//! 32 KiB blocks and checksum each right after copying it, while it is still in cache.
//!
//! Also the plain copy out of a slot ([`copy_from_shm`]) that the reader uses for a chunk's
//! prefix, header and trailer.

/// The reader copies and checksums in blocks this large, so the checksum reads the block
/// from L1/L2 right after the copy wrote it.
const COPY_BLOCK: usize = 32 * 1024;

/// Appends bytes `[from, to)` of a slot to `out`, which holds exactly `from` bytes and has
/// capacity for `to` (both checked).
///
/// # Safety
/// `src` is valid for reads of `to` bytes and does not overlap `out`'s buffer.
pub(super) unsafe fn copy_from_shm(out: &mut Vec<u8>, src: *const u8, from: usize, to: usize) {
    assert!(out.len() == from && from <= to && to <= out.capacity());
    // SAFETY: `src` is readable for `to` bytes (the caller's contract); the destination is
    // `out`'s spare capacity (checked above), disjoint from `src`. The bytes are plain u8
    // (any value valid); no Rust reference to the shared bytes is formed. A slot being read is
    // READY, so by protocol no writer touches it; a misbehaving process that does can only
    // tear the copy, which the checksum then rejects.
    unsafe {
        std::ptr::copy_nonoverlapping(src.add(from), out.as_mut_ptr().add(from), to - from);
        out.set_len(to);
    }
}

/// Which implementation the CPU supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kernel {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Blocks,
}

impl Kernel {
    pub(super) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("pclmulqdq")
                && std::arch::is_x86_feature_detected!("sse4.1")
                && std::arch::is_x86_feature_detected!("vpclmulqdq")
            {
                if std::arch::is_x86_feature_detected!("avx512f") {
                    return Kernel::Avx512;
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    return Kernel::Avx2;
                }
            }
        }
        Kernel::Blocks
    }
}

/// Below this many bytes the fused kernels' setup is not worth it.
const MIN_FUSED: usize = 4096;

/// Appends slot bytes `[from, to)` to `out`, which holds exactly `from` bytes and has
/// capacity for `to` (both checked); returns the CRC-32 of the appended bytes.
///
/// # Safety
/// `src` is valid for reads of `to` bytes and does not overlap `out`'s buffer.
pub(super) unsafe fn append(
    kernel: Kernel,
    out: &mut Vec<u8>,
    src: *const u8,
    from: usize,
    to: usize,
) -> u32 {
    assert!(out.len() == from && from <= to && to <= out.capacity());
    #[allow(unused_mut)]
    let mut crc = 0u32;
    #[allow(unused_mut)]
    let mut at = from;
    #[cfg(target_arch = "x86_64")]
    {
        let stride = match kernel {
            Kernel::Avx512 => 256,
            Kernel::Avx2 => 128,
            Kernel::Blocks => 0,
        };
        if stride > 0 && to - from >= MIN_FUSED {
            let n = (to - from) / stride * stride;
            // SAFETY: the kernels need their CPU features, which `Kernel::detect` (or
            // `available`) confirmed before this variant could exist. Both ranges hold `n`
            // bytes: the source lies within the first `to` bytes of `src` (readable per
            // this function's contract), the destination is `out`'s spare capacity
            // (checked above), disjoint from it. The kernels read the source with raw
            // vector loads (no reference to shared bytes is formed).
            unsafe {
                let dst = out.as_mut_ptr().add(at);
                crc = match kernel {
                    Kernel::Avx512 => x86::copy_crc_avx512(dst, src.add(at), n, crc),
                    _ => x86::copy_crc_avx2(dst, src.add(at), n, crc),
                };
                out.set_len(at + n);
            }
            at += n;
        }
    }
    let _ = kernel;
    let mut hasher = crc32fast::Hasher::new_with_initial(crc);
    while at < to {
        let end = to.min(at + COPY_BLOCK);
        // SAFETY: end <= to: readable per this function's contract.
        unsafe { copy_from_shm(out, src, at, end) };
        hasher.update(&out[at..end]);
        at = end;
    }
    hasher.finalize()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    // Fold constants (crc32fast's): by 2048 bits (16 streams of 128), by 1024 bits
    // (8 streams), and by 128 bits (K3, K4) to collapse the streams.
    const K_2048_LOW: i64 = 0x1_1542_778a;
    const K_2048_HIGH: i64 = 0x1_322d_1430;
    const K_1024_LOW: i64 = 0x1_e88e_f372;
    const K_1024_HIGH: i64 = 0x1_4a7f_e880;
    const K3: i64 = 0x1_7519_97d0;
    const K4: i64 = 0x0_ccaa_009e;

    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn fold128(a: __m128i, b: __m128i, k: __m128i) -> __m128i {
        let t1 = _mm_clmulepi64_si128(a, k, 0x00);
        let t2 = _mm_clmulepi64_si128(a, k, 0x11);
        _mm_xor_si128(_mm_xor_si128(b, t1), t2)
    }

    /// The CRC value of the 16-byte message `x` processed from a zero register.
    fn finish(x: __m128i) -> u32 {
        let mut bytes = [0u8; 16];
        // SAFETY: `bytes` is 16 writable bytes; the unaligned store needs no alignment.
        unsafe { _mm_storeu_si128(bytes.as_mut_ptr() as *mut __m128i, x) };
        // A register of 0 is the running value !0.
        let mut h = crc32fast::Hasher::new_with_initial(!0);
        h.update(&bytes);
        h.finalize()
    }

    /// Copies `len` bytes (a positive multiple of 256) from `src` to `dst` and returns the
    /// CRC-32 continuing from `crc`.
    ///
    /// # Safety
    /// The CPU supports AVX-512F, VPCLMULQDQ, PCLMULQDQ and SSE4.1; `src` is readable and
    /// `dst` writable for `len` bytes, and the ranges do not overlap.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.1")]
    pub(super) unsafe fn copy_crc_avx512(
        dst: *mut u8,
        src: *const u8,
        len: usize,
        crc: u32,
    ) -> u32 {
        debug_assert!(len >= 256 && len.is_multiple_of(256));
        // SAFETY (loads and stores below): every offset is below `len`, and the caller
        // guarantees `len` readable/writable bytes; the unaligned forms need no alignment.
        let ld = |o: usize| unsafe { _mm512_loadu_si512(src.add(o) as *const _) };
        let st = |o: usize, v| unsafe { _mm512_storeu_si512(dst.add(o) as *mut _, v) };
        // Four streams of 64 bytes per 256-byte block, folded in parallel.
        let mut v = [0, 64, 128, 192].map(|o| {
            let a = ld(o);
            st(o, a);
            a
        });
        // The running CRC enters as the complemented register xor-ed into the first bytes.
        v[0] = _mm512_xor_si512(v[0], _mm512_castsi128_si512(_mm_cvtsi32_si128(!crc as i32)));
        let k = _mm512_broadcast_i32x4(_mm_set_epi64x(K_2048_HIGH, K_2048_LOW));
        let fold = |a: __m512i, b: __m512i| {
            let t1 = _mm512_clmulepi64_epi128(a, k, 0x00);
            let t2 = _mm512_clmulepi64_epi128(a, k, 0x11);
            _mm512_ternarylogic_epi64(b, t1, t2, 0x96) // b ^ t1 ^ t2
        };
        for at in (256..len).step_by(256) {
            for (i, vi) in v.iter_mut().enumerate() {
                let a = ld(at + 64 * i);
                st(at + 64 * i, a);
                *vi = fold(*vi, a);
            }
        }
        // Collapse the 16 streams in increasing byte offset, each folded by 128 bits.
        let k3k4 = _mm_set_epi64x(K4, K3);
        let mut x = _mm512_castsi512_si128(v[0]);
        x = fold128(x, _mm512_extracti32x4_epi32::<1>(v[0]), k3k4);
        x = fold128(x, _mm512_extracti32x4_epi32::<2>(v[0]), k3k4);
        x = fold128(x, _mm512_extracti32x4_epi32::<3>(v[0]), k3k4);
        for v in [v[1], v[2], v[3]] {
            x = fold128(x, _mm512_castsi512_si128(v), k3k4);
            x = fold128(x, _mm512_extracti32x4_epi32::<1>(v), k3k4);
            x = fold128(x, _mm512_extracti32x4_epi32::<2>(v), k3k4);
            x = fold128(x, _mm512_extracti32x4_epi32::<3>(v), k3k4);
        }
        finish(x)
    }

    /// [`copy_crc_avx512`] with 256-bit registers: `len` a positive multiple of 128.
    ///
    /// # Safety
    /// The CPU supports AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.1; `src` is readable and
    /// `dst` writable for `len` bytes, and the ranges do not overlap.
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.1")]
    pub(super) unsafe fn copy_crc_avx2(dst: *mut u8, src: *const u8, len: usize, crc: u32) -> u32 {
        debug_assert!(len >= 128 && len.is_multiple_of(128));
        // SAFETY (loads and stores below): as in `copy_crc_avx512`.
        let ld = |o: usize| unsafe { _mm256_loadu_si256(src.add(o) as *const __m256i) };
        let st = |o: usize, v| unsafe { _mm256_storeu_si256(dst.add(o) as *mut __m256i, v) };
        let mut v = [0, 32, 64, 96].map(|o| {
            let a = ld(o);
            st(o, a);
            a
        });
        v[0] = _mm256_xor_si256(v[0], _mm256_castsi128_si256(_mm_cvtsi32_si128(!crc as i32)));
        let k = _mm256_set_epi64x(K_1024_HIGH, K_1024_LOW, K_1024_HIGH, K_1024_LOW);
        let fold = |a: __m256i, b: __m256i| {
            let t1 = _mm256_clmulepi64_epi128(a, k, 0x00);
            let t2 = _mm256_clmulepi64_epi128(a, k, 0x11);
            _mm256_xor_si256(_mm256_xor_si256(b, t1), t2)
        };
        for at in (128..len).step_by(128) {
            for (i, vi) in v.iter_mut().enumerate() {
                let a = ld(at + 32 * i);
                st(at + 32 * i, a);
                *vi = fold(*vi, a);
            }
        }
        let k3k4 = _mm_set_epi64x(K4, K3);
        let mut x = _mm256_castsi256_si128(v[0]);
        x = fold128(x, _mm256_extracti128_si256::<1>(v[0]), k3k4);
        for v in [v[1], v[2], v[3]] {
            x = fold128(x, _mm256_castsi256_si128(v), k3k4);
            x = fold128(x, _mm256_extracti128_si256::<1>(v), k3k4);
        }
        finish(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel this CPU can run (tests compare them all).
    fn available() -> Vec<Kernel> {
        let mut all = vec![Kernel::Blocks];
        #[cfg(target_arch = "x86_64")]
        {
            let best = Kernel::detect();
            if best == Kernel::Avx512 {
                all.push(Kernel::Avx512);
            }
            if best != Kernel::Blocks && std::arch::is_x86_feature_detected!("avx2") {
                all.push(Kernel::Avx2);
            }
        }
        all
    }

    /// Every kernel copies exactly and computes crc32fast's checksum, for lengths around
    /// every crossover and unaligned starts.
    #[test]
    fn kernels_match_crc32fast() {
        let data: Vec<u8> = (0..140_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let lens = [
            0usize, 1, 15, 16, 255, 256, 4095, 4096, 4097, 4224, 5000, 32768, 32769, 65536, 100_003,
        ];
        for kernel in available() {
            for &len in &lens {
                for pre in [0usize, 1, 68, 4096] {
                    // A "slot" whose first `pre` bytes are already in `out`.
                    let slot = &data[3..3 + pre + len];
                    let mut out = Vec::with_capacity(pre + len);
                    out.extend_from_slice(&slot[..pre]);
                    // SAFETY: `slot` holds pre + len readable bytes, apart from `out`.
                    let got = unsafe { append(kernel, &mut out, slot.as_ptr(), pre, pre + len) };
                    let what = format!("{kernel:?} len {len} after {pre}");
                    assert_eq!(got, crc32fast::hash(&slot[pre..]), "{what}");
                    assert_eq!(out, slot, "{what}");
                }
            }
        }
    }
}

//! Bit-exact port of `numpy.random.Generator(numpy.random.PCG64(numpy.random.SeedSequence(seed)))`,
//! i.e. what `numpy.random.default_rng(seed)` returns (and what gymnasium's
//! `env.np_random` is after `env.reset(seed=seed)`).
//!
//! Every public method documents the numpy function it mirrors. The sources
//! followed are numpy's own (identical for the relevant parts in 1.26.4 and
//! 2.4.x):
//!
//! * `numpy/random/bit_generator.pyx`: [`SeedSequence`]
//! * `numpy/random/_pcg64.pyx`, `numpy/random/src/pcg64/pcg64.{h,c}`: [`Pcg64`]
//! * `numpy/random/_generator.pyx`, `numpy/random/_bounded_integers.pyx.in`,
//!   `numpy/random/src/distributions/distributions.c`,
//!   `numpy/random/src/distributions/ziggurat_constants.h`: [`Generator`]
//!
//! Only the 64-bit-integer / `float64` paths are ported (the defaults of
//! `Generator.integers`, `random`, `standard_normal`, `normal`), plus the two
//! other calls POPGym makes: `random(dtype=np.float32)`
//! ([`Generator::random_f32`]) and `choice(n, size, replace=False)`
//! ([`Generator::choice_without_replacement`]), and `uniform`
//! ([`Generator::uniform`], gymnasium's CartPole and Pendulum resets).
//!
//! Checked draw for draw against numpy by `common/tests/numpy_rng.rs` (which
//! fails, never skips, without Python and numpy; `RECUR_PYTHON` picks the
//! interpreter). `standard_normal` calls `f64::exp`/`f64::ln_1p` in its rare
//! wedge and tail branches: on Linux these are glibc's, the same functions
//! numpy's C code calls; on a platform whose libm differs a last-ulp
//! difference there is possible in principle. Everything else is integer
//! arithmetic or exactly rounded IEEE operations.

mod ziggurat;

use ziggurat::{FI_DOUBLE, KI_DOUBLE, WI_DOUBLE, ZIGGURAT_NOR_INV_R, ZIGGURAT_NOR_R};

// ---------------------------------------------------------------------------
// SeedSequence
// ---------------------------------------------------------------------------

/// `DEFAULT_POOL_SIZE` in `bit_generator.pyx`.
const POOL_SIZE: usize = 4;
const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
/// `XSHIFT = np.dtype(np.uint32).itemsize * 8 // 2`.
const XSHIFT: u32 = 16;

/// `hashmix` in `bit_generator.pyx`; `hash_const` is updated in place.
fn hashmix(mut value: u32, hash_const: &mut u32) -> u32 {
    value ^= *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    value = value.wrapping_mul(*hash_const);
    value ^= value >> XSHIFT;
    value
}

/// `mix` in `bit_generator.pyx`.
fn mix(x: u32, y: u32) -> u32 {
    let mut result = MIX_MULT_L
        .wrapping_mul(x)
        .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    result ^= result >> XSHIFT;
    result
}

/// Mirrors `numpy.random.SeedSequence(entropy)` with the defaults
/// `spawn_key=()` and `pool_size=4` (spawning is not ported).
///
/// Only the mixed 128-bit entropy pool is kept; that is all
/// `generate_state` reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedSequence {
    pool: [u32; POOL_SIZE],
}

impl SeedSequence {
    /// `SeedSequence(entropy)` where `entropy` has already been converted to
    /// its `uint32` words (`_coerce_to_uint32_array`), followed by
    /// `mix_entropy(pool, entropy)`.
    pub fn from_entropy_words(entropy: &[u32]) -> Self {
        let mut mixer = [0u32; POOL_SIZE];
        let mut hash_const = INIT_A;

        // Add in the entropy up to the pool size; run the hash out on zeros
        // if there are fewer entropy words than pool words.
        for (i, slot) in mixer.iter_mut().enumerate() {
            let word = entropy.get(i).copied().unwrap_or(0);
            *slot = hashmix(word, &mut hash_const);
        }

        // Mix all bits together so late bits can affect earlier bits.
        for i_src in 0..POOL_SIZE {
            for i_dst in 0..POOL_SIZE {
                if i_src != i_dst {
                    let h = hashmix(mixer[i_src], &mut hash_const);
                    mixer[i_dst] = mix(mixer[i_dst], h);
                }
            }
        }

        // Add any remaining entropy, mixing each new word with each pool word.
        for &word in entropy.iter().skip(POOL_SIZE) {
            for slot in mixer.iter_mut() {
                let h = hashmix(word, &mut hash_const);
                *slot = mix(*slot, h);
            }
        }

        SeedSequence { pool: mixer }
    }

    /// `SeedSequence(seed)` for a non-negative int that fits in 64 bits: the int is split
    /// into little-endian 32-bit words, lowest word first, with no trailing zero words
    /// (`_int_to_uint32_array`; `0` becomes the single word `[0]`).
    pub fn from_u64(seed: u64) -> Self {
        let words = [seed as u32, (seed >> 32) as u32];
        Self::from_entropy_words(&words[..1 + usize::from(seed >> 32 != 0)])
    }

    /// `SeedSequence.pool` (the mixed entropy pool, 4 `uint32` words).
    pub fn pool(&self) -> [u32; POOL_SIZE] {
        self.pool
    }

    /// `SeedSequence.generate_state(n_words, dtype=np.uint32)`.
    pub fn generate_state_u32(&self, n_words: usize) -> Vec<u32> {
        let mut hash_const = INIT_B;
        self.pool
            .iter()
            .cycle()
            .take(n_words)
            .map(|&word| {
                let mut data = word ^ hash_const;
                hash_const = hash_const.wrapping_mul(MULT_B);
                data = data.wrapping_mul(hash_const);
                data ^ (data >> XSHIFT)
            })
            .collect()
    }

    /// `SeedSequence.generate_state(n_words, dtype=np.uint64)`: draws
    /// `2 * n_words` `uint32` words and views consecutive pairs as
    /// little-endian `uint64` (first word is the low half).
    pub fn generate_state_u64(&self, n_words: usize) -> Vec<u64> {
        self.generate_state_u32(2 * n_words)
            .chunks_exact(2)
            .map(|p| u64::from(p[0]) | (u64::from(p[1]) << 32))
            .collect()
    }
}

// ---------------------------------------------------------------------------
// PCG64
// ---------------------------------------------------------------------------

/// `PCG_DEFAULT_MULTIPLIER_128` in `pcg64.h`.
const PCG_DEFAULT_MULTIPLIER_128: u128 =
    (2_549_297_995_355_413_924u128 << 64) + 4_865_540_595_714_422_341u128;

/// Mirrors `numpy.random.PCG64` (PCG XSL-RR 128/64, the `pcg64_state`
/// struct of `pcg64.h`).
///
/// Besides the 128-bit LCG state and increment this carries numpy's
/// `has_uint32`/`uinteger` pair: [`Pcg64::next_u32`] draws a full 64-bit
/// output, returns its low 32 bits and keeps the high 32 bits for the next
/// `next_u32` call. [`Pcg64::next_u64`] and [`Pcg64::next_double`] neither
/// read nor clear that buffer, so a buffered half survives any number of
/// interleaved 64-bit draws (exactly as in numpy).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
    /// numpy `has_uint32`: whether `uinteger` holds an unused high half.
    has_uint32: bool,
    /// numpy `uinteger`: high 32 bits of the last 64-bit draw made by `next_u32`.
    uinteger: u32,
}

impl Pcg64 {
    /// `PCG64(seed_seq)`: `val = seed_seq.generate_state(4, np.uint64)`, then
    /// `pcg64_set_seed(state, &val[0], &val[2])` (`pcg_setseq_128_srandom_r(rng, initstate,
    /// initseq)`) with an empty uint32 buffer.
    pub fn new(seed_seq: &SeedSequence) -> Self {
        let val = seed_seq.generate_state_u64(4);
        let initstate = (u128::from(val[0]) << 64) | u128::from(val[1]);
        let initseq = (u128::from(val[2]) << 64) | u128::from(val[3]);
        let mut rng = Pcg64 {
            state: 0,
            inc: (initseq << 1) | 1,
            has_uint32: false,
            uinteger: 0,
        };
        rng.step();
        rng.state = rng.state.wrapping_add(initstate);
        rng.step();
        rng
    }

    /// `(state, inc)` as in `PCG64().state['state']` (`'state'`, `'inc'`).
    pub fn state_and_increment(&self) -> (u128, u128) {
        (self.state, self.inc)
    }

    /// The buffered high half, if any: `Some(uinteger)` when numpy's
    /// `PCG64().state['has_uint32'] == 1`.
    pub fn buffered_u32(&self) -> Option<u32> {
        self.has_uint32.then_some(self.uinteger)
    }

    /// `pcg_setseq_128_step_r`.
    fn step(&mut self) {
        self.state = self
            .state
            .wrapping_mul(PCG_DEFAULT_MULTIPLIER_128)
            .wrapping_add(self.inc);
    }

    /// `pcg64_next64` (= `PCG64.random_raw()`): step, then XSL-RR output
    /// `rotr(hi ^ lo, hi >> 58)`. Does not touch the uint32 buffer.
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let hi = (self.state >> 64) as u64;
        let lo = self.state as u64;
        (hi ^ lo).rotate_right((hi >> 58) as u32)
    }

    /// `pcg64_next32`: returns the buffered high half if there is one;
    /// otherwise draws 64 bits, buffers the high half, returns the low half.
    pub fn next_u32(&mut self) -> u32 {
        if self.has_uint32 {
            self.has_uint32 = false;
            return self.uinteger;
        }
        let next = self.next_u64();
        self.has_uint32 = true;
        self.uinteger = (next >> 32) as u32;
        next as u32
    }

    /// `pcg64_double` / `uint64_to_double`: `(next_u64 >> 11) * 2^-53`.
    pub fn next_double(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
}

// ---------------------------------------------------------------------------
// Generator
// ---------------------------------------------------------------------------

/// Mirrors `numpy.random.Generator` over a [`Pcg64`] bit generator.
///
/// All state, including the uint32 buffer used by [`Generator::integers`]
/// for ranges below 2^32 and by [`Generator::shuffle`], lives in the
/// [`Pcg64`], exactly as in numpy.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Generator {
    bit_generator: Pcg64,
}

impl Generator {
    /// `numpy.random.default_rng(seed)` for a non-negative integer seed, i.e.
    /// `Generator(PCG64(SeedSequence(seed)))`.
    pub fn from_seed(seed: u64) -> Self {
        Self::new(Pcg64::new(&SeedSequence::from_u64(seed)))
    }

    /// `Generator(bit_generator)`.
    pub fn new(bit_generator: Pcg64) -> Self {
        Generator { bit_generator }
    }

    /// `Generator.bit_generator`.
    pub fn bit_generator(&self) -> &Pcg64 {
        &self.bit_generator
    }

    /// `Generator.bit_generator.random_raw()` (`next_uint64`).
    pub fn next_u64(&mut self) -> u64 {
        self.bit_generator.next_u64()
    }

    /// `next_uint32` in `distributions.c` (= `pcg64_next32`, with its
    /// buffering of the high half; see [`Pcg64::next_u32`]). From Python this
    /// is what `Generator.integers(0, 2**32)` returns.
    pub fn next_u32(&mut self) -> u32 {
        self.bit_generator.next_u32()
    }

    /// `Generator.random()` (float64): `random_standard_uniform` /
    /// `next_double`, i.e. `(next_uint64 >> 11) * 2^-53`, in `[0, 1)`.
    pub fn random(&mut self) -> f64 {
        self.bit_generator.next_double()
    }

    /// `Generator.uniform(low, high)` for one value: `random_uniform` in `distributions.c`,
    /// `low + (high - low) * next_double()`, with `high - low` computed first in float64 (as
    /// `Generator.uniform` does, for scalar and array bounds alike). An array call
    /// (`uniform(low, high, size)`, or array bounds) is one such call per element, in C order,
    /// each with its own element's bounds.
    ///
    /// # Panics
    /// If `high - low` is negative or not finite (numpy raises `ValueError` /
    /// `OverflowError`).
    pub fn uniform(&mut self, low: f64, high: f64) -> f64 {
        let range = high - low;
        assert!(range.is_finite(), "high - low range exceeds valid bounds");
        assert!(range >= 0.0, "high - low < 0");
        low + range * self.random()
    }

    /// `Generator.random(dtype=np.float32)`: `next_float` in
    /// `distributions.c`, `(next_uint32 >> 8) * 2^-24`, in `[0, 1)`. Draws
    /// through the buffered [`Generator::next_u32`]; an array of `n` such
    /// values (`random(n, dtype=np.float32)`) is `n` calls in order.
    pub fn random_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 * (1.0f32 / 16_777_216.0)
    }

    /// `Generator.integers(low, high)` with the default `dtype=np.int64` and
    /// `endpoint=False`: a value in `[low, high)`.
    ///
    /// Follows `_rand_int64` (`_bounded_integers.pyx.in`) with
    /// `use_masked=False`, which calls `random_bounded_uint64_fill(off=low,
    /// rng=high-1-low)`; see [`Generator::bounded_uint64`] for the branches.
    ///
    /// # Panics
    /// If `low >= high` (numpy raises `ValueError: low >= high`).
    pub fn integers(&mut self, low: i64, high: i64) -> i64 {
        assert!(low < high, "low >= high");
        // high - 1 - low always fits in u64 once low < high.
        let rng = (i128::from(high) - 1 - i128::from(low)) as u64;
        let off = low as u64;
        off.wrapping_add(self.bounded_uint64(rng)) as i64
    }

    /// `random_bounded_uint64(state, 0, rng, mask, use_masked=false)` from
    /// `distributions.c`: a uniform value in the closed range `[0, rng]`.
    ///
    /// * `rng == 0`: returns 0 without drawing anything.
    /// * `rng < 2^32 - 1`: 32-bit Lemire (`buffered_bounded_lemire_uint32`),
    ///   drawing via `next_uint32`, so half of a 64-bit draw may be buffered.
    /// * `rng == 2^32 - 1`: one `next_uint32`.
    /// * `rng == 2^64 - 1`: one `next_uint64`.
    /// * otherwise: 64-bit Lemire (`bounded_lemire_uint64`).
    pub fn bounded_uint64(&mut self, rng: u64) -> u64 {
        if rng == 0 {
            0
        } else if rng < 0xFFFF_FFFF {
            u64::from(self.bounded_lemire_uint32(rng as u32))
        } else if rng == 0xFFFF_FFFF {
            u64::from(self.next_u32())
        } else if rng == u64::MAX {
            self.next_u64()
        } else {
            self.bounded_lemire_uint64(rng)
        }
    }

    /// `buffered_bounded_lemire_uint32` (Lemire, arXiv:1805.10941), `rng < 2^32 - 1`.
    fn bounded_lemire_uint32(&mut self, rng: u32) -> u32 {
        let rng_excl = rng + 1;
        let mut m = u64::from(self.next_u32()) * u64::from(rng_excl);
        let mut leftover = m as u32;
        if leftover < rng_excl {
            let threshold = (u32::MAX - rng) % rng_excl;
            while leftover < threshold {
                m = u64::from(self.next_u32()) * u64::from(rng_excl);
                leftover = m as u32;
            }
        }
        (m >> 32) as u32
    }

    /// `bounded_lemire_uint64` (the `__uint128_t` branch), `rng < 2^64 - 1`.
    fn bounded_lemire_uint64(&mut self, rng: u64) -> u64 {
        let rng_excl = rng + 1;
        let mut m = u128::from(self.next_u64()) * u128::from(rng_excl);
        let mut leftover = m as u64;
        if leftover < rng_excl {
            let threshold = (u64::MAX - rng) % rng_excl;
            while leftover < threshold {
                m = u128::from(self.next_u64()) * u128::from(rng_excl);
                leftover = m as u64;
            }
        }
        (m >> 64) as u64
    }

    /// `random_interval(state, max)` from `distributions.c`: a value in
    /// `[0, max]` by masked rejection sampling (not Lemire). Uses buffered
    /// `next_uint32` when `max <= 2^32 - 1`, `next_uint64` otherwise. This is
    /// what `Generator.shuffle`/`permutation` use.
    pub fn random_interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        // Smallest bit mask >= max.
        let mask = u64::MAX >> max.leading_zeros();
        loop {
            let raw = if max <= 0xFFFF_FFFF {
                u64::from(self.next_u32())
            } else {
                self.next_u64()
            };
            if raw & mask <= max {
                return raw & mask;
            }
        }
    }

    /// `Generator.standard_normal()` (float64): numpy's 256-level ziggurat
    /// `random_standard_normal` with the `ki_double`/`wi_double`/`fi_double`
    /// tables.
    pub fn standard_normal(&mut self) -> f64 {
        loop {
            let mut r = self.next_u64();
            let idx = (r & 0xff) as usize;
            r >>= 8;
            let sign = r & 0x1;
            let rabs = (r >> 1) & 0x000f_ffff_ffff_ffff;
            let mut x = rabs as f64 * WI_DOUBLE[idx];
            if sign & 0x1 != 0 {
                x = -x;
            }
            if rabs < KI_DOUBLE[idx] {
                return x; // 99.3% of the time.
            }
            if idx == 0 {
                // Tail: numpy uses log1p(-U) (i.e. log(1 - U)) to avoid log(0).
                loop {
                    let xx = -ZIGGURAT_NOR_INV_R * (-self.random()).ln_1p();
                    let yy = -(-self.random()).ln_1p();
                    if yy + yy > xx * xx {
                        return if (rabs >> 8) & 0x1 != 0 {
                            -(ZIGGURAT_NOR_R + xx)
                        } else {
                            ZIGGURAT_NOR_R + xx
                        };
                    }
                }
            } else if (FI_DOUBLE[idx - 1] - FI_DOUBLE[idx]) * self.random() + FI_DOUBLE[idx]
                < (-0.5 * x * x).exp()
            {
                return x;
            }
        }
    }

    /// `Generator.normal(loc, scale)` for scalars: `random_normal`, i.e.
    /// `loc + scale * random_standard_normal()`.
    ///
    /// # Panics
    /// If `scale` has its sign bit set and is not NaN (numpy's
    /// `CONS_NON_NEGATIVE` check raises `ValueError: scale < 0`, also for
    /// `-0.0`).
    pub fn normal(&mut self, loc: f64, scale: f64) -> f64 {
        assert!(scale.is_nan() || !scale.is_sign_negative(), "scale < 0");
        loc + scale * self.standard_normal()
    }

    /// The index drawn by `Generator.choice(a)` with `size=None`,
    /// `replace=True`, `p=None`, where `a` is the int `n` or any sequence of
    /// length `n`: `integers(0, n)` (int64). `choice(seq)` returns
    /// `seq[choice_index(len(seq))]`.
    ///
    /// # Panics
    /// If `n == 0` (numpy raises `ValueError`).
    pub fn choice_index(&mut self, n: usize) -> usize {
        assert!(n > 0, "a must be a positive integer / non-empty sequence");
        let high = i64::try_from(n).expect("population too large for int64");
        self.integers(0, high) as usize
    }

    /// `Generator.shuffle(x)` for a 1-D sequence/array (axis 0): Fisher-Yates
    /// from the end, `for i in reversed(range(1, n)): j = random_interval(i);
    /// swap(x[i], x[j])`. The list path and the ndarray fast path
    /// (`_shuffle_raw`) draw identically.
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        for i in (1..x.len()).rev() {
            let j = self.random_interval(i as u64) as usize;
            x.swap(i, j);
        }
    }

    /// The indices `Generator.choice(pop_size, size=size, replace=False)`
    /// returns (`p=None`, `shuffle=True`); `choice(a, size, replace=False)`
    /// for a 1-D array `a` of length `pop_size` returns `a[indices]`.
    ///
    /// Follows `_generator.pyx`: when `pop_size > 10000` and
    /// `size > pop_size // 50` it shuffles the tail of `arange(pop_size)`
    /// (`_shuffle_int(pop_size, max(pop_size - size, 1))`) and keeps its last
    /// `size` entries; otherwise it runs Floyd's algorithm (for `j` in
    /// `pop_size - size .. pop_size`: `val = random_bounded_uint64(0, j)`,
    /// take `val` unless already taken, else `j`) and then shuffles the
    /// result with `_shuffle_int(size, 1)`. `_shuffle_int` is Fisher-Yates
    /// from the end drawing `random_bounded_uint64(0, i)` (Lemire), not the
    /// masked `random_interval` that [`Generator::shuffle`] uses.
    ///
    /// # Panics
    /// If `size > pop_size` (numpy raises `ValueError`).
    pub fn choice_without_replacement(&mut self, pop_size: usize, size: usize) -> Vec<usize> {
        assert!(
            size <= pop_size,
            "Cannot take a larger sample than population when replace is False"
        );
        const CUTOFF: usize = 50;
        if pop_size > 10_000 && size > pop_size / CUTOFF {
            let mut idx: Vec<usize> = (0..pop_size).collect();
            self.shuffle_int(&mut idx, (pop_size - size).max(1));
            return idx.split_off(pop_size - size);
        }
        let mut taken = vec![false; pop_size];
        let mut idx = Vec::with_capacity(size);
        for j in pop_size - size..pop_size {
            let val = self.bounded_uint64(j as u64) as usize;
            let pick = if taken[val] { j } else { val };
            taken[pick] = true;
            idx.push(pick);
        }
        self.shuffle_int(&mut idx, 1);
        idx
    }

    /// `Generator._shuffle_int(n, first, data)`: for `i` in
    /// `reversed(range(first, n))`, `j = random_bounded_uint64(0, i)`, swap.
    fn shuffle_int(&mut self, data: &mut [usize], first: usize) {
        for i in (first..data.len()).rev() {
            let j = self.bounded_uint64(i as u64) as usize;
            data.swap(i, j);
        }
    }

    /// `Generator.permutation(n)` for an int: `arr = np.arange(n);
    /// shuffle(arr)`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        self.shuffle(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values from numpy's own docstrings (`default_rng` examples).
    #[test]
    fn docstring_examples() {
        let mut rng = Generator::from_seed(12345);
        assert_eq!(rng.random(), 0.22733602246716966);
        let mut rng = Generator::from_seed(12345);
        let v: Vec<i64> = (0..3).map(|_| rng.integers(0, 10)).collect();
        assert_eq!(v, [6, 2, 7]);
    }

    #[test]
    fn u32_buffer_survives_u64_draws() {
        let mut a = Generator::from_seed(7);
        let mut b = a.clone();
        let full = b.next_u64();
        assert_eq!(a.next_u32(), full as u32);
        assert_eq!(a.bit_generator().buffered_u32(), Some((full >> 32) as u32));
        let x = a.next_u64();
        assert_eq!(x, b.next_u64());
        assert_eq!(a.next_u32(), (full >> 32) as u32);
        assert_eq!(a.bit_generator().buffered_u32(), None);
    }

    #[test]
    fn empty_range_draws_nothing() {
        let mut a = Generator::from_seed(3);
        let b = a.clone();
        assert_eq!(a.integers(5, 6), 5);
        assert_eq!(a, b);
    }
}

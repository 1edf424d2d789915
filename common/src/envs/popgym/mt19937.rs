//! The two Mersenne Twisters popgym's labyrinths draw from, bit for bit: CPython's `random`
//! module ([`PyRandom`]) and numpy's legacy global `np.random` ([`LegacyRandomState`]).
//!
//! popgym's `MazeEnv.reset(seed=s)` calls `random.seed(s)` and `np.random.seed(s)`, and mazelib's
//! Hunt-and-Kill generator then draws cells with `random.randrange`/`random.choice` and shuffles
//! neighbour lists with `np.random.shuffle`. Both generators are MT19937 (Matsumoto and
//! Nishimura's reference `genrand_int32`); they differ in seeding:
//!
//! * CPython's `random.seed(int)` feeds `abs(int)` as little-endian 32-bit words to
//!   `init_by_array` (`Modules/_randommodule.c: random_seed`), and `getrandbits(k)` for
//!   `k <= 32` is `genrand_uint32() >> (32 - k)`. `randrange` and `choice` reject with
//!   `_randbelow_with_getrandbits` (`Lib/random.py`).
//! * numpy's `RandomState.seed(int)` (`_legacy_seeding`, for `0 <= int < 2**32`) is
//!   `init_genrand(int)`; `shuffle` of a list swaps `x[i]` with `x[random_interval(i)]` for `i`
//!   from `n - 1` down to 1, `random_interval` being a masked rejection over 32-bit draws
//!   (`distributions.c`). numpy refuses larger seeds; here they seed by `init_by_array` over
//!   their 32-bit words, as numpy does for an array seed.
//!
//! `common/tests/python_random.rs` compares both with Python and numpy.

const N: usize = 624;
const M: usize = 397;

/// MT19937's state: 624 words and the next position.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mt19937 {
    mt: Vec<u32>,
    pos: usize,
}

impl Mt19937 {
    /// `init_genrand(seed)`.
    pub fn init_genrand(seed: u32) -> Self {
        let mut mt = vec![0u32; N];
        mt[0] = seed;
        for i in 1..N {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        Self { mt, pos: N }
    }

    /// `init_by_array(key)`; an empty key is the one word 0 (as CPython seeds 0).
    pub fn init_by_array(key: &[u32]) -> Self {
        let key = if key.is_empty() { &[0][..] } else { key };
        let mut s = Self::init_genrand(19_650_218);
        let mt = &mut s.mt;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        s
    }

    /// The state words (numpy's `get_state()[1]`, CPython's `getstate()[1][:624]`).
    pub fn key(&self) -> &[u32] {
        &self.mt
    }

    /// `genrand_uint32`: the next tempered word.
    pub fn next_u32(&mut self) -> u32 {
        if self.pos >= N {
            self.twist();
        }
        let mut y = self.mt[self.pos];
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    fn twist(&mut self) {
        let mix = |a: u32, b: u32| {
            let y = (a & 0x8000_0000) | (b & 0x7fff_ffff);
            (y >> 1) ^ if y & 1 == 1 { 0x9908_b0df } else { 0 }
        };
        for k in 0..N {
            let y = mix(self.mt[k], self.mt[(k + 1) % N]);
            self.mt[k] = self.mt[(k + M) % N] ^ y;
        }
        self.pos = 0;
    }
}

/// The 32-bit words of `seed`, least significant first (at least one).
fn words(seed: u64) -> Vec<u32> {
    if seed >> 32 == 0 {
        vec![seed as u32]
    } else {
        vec![seed as u32, (seed >> 32) as u32]
    }
}

/// CPython's `random.Random` (the module-level functions' generator).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PyRandom(Mt19937);

impl PyRandom {
    /// `random.seed(seed)`.
    pub fn seeded(seed: u64) -> Self {
        Self(Mt19937::init_by_array(&words(seed)))
    }

    /// The generator's words.
    pub fn key(&self) -> &[u32] {
        self.0.key()
    }

    /// `getrandbits(k)`, `1 <= k <= 32`.
    pub fn getrandbits(&mut self, k: u32) -> u32 {
        assert!((1..=32).contains(&k), "getrandbits({k}): 1 to 32 bits");
        self.0.next_u32() >> (32 - k)
    }

    /// `_randbelow(n)`: uniform in `0..n`, `1 <= n < 2**32`.
    pub fn randbelow(&mut self, n: usize) -> usize {
        assert!(n >= 1 && n <= u32::MAX as usize, "randbelow({n})");
        let k = usize::BITS - n.leading_zeros();
        loop {
            let r = self.getrandbits(k) as usize;
            if r < n {
                return r;
            }
        }
    }

    /// `randrange(start, stop, step)` for `stop > start` and `step >= 1`.
    pub fn randrange(&mut self, start: usize, stop: usize, step: usize) -> usize {
        assert!(
            stop > start && step >= 1,
            "randrange({start}, {stop}, {step})"
        );
        let n = (stop - start).div_ceil(step);
        start + step * self.randbelow(n)
    }

    /// `choice(seq)`: an element of a non-empty slice.
    pub fn choice<T: Copy>(&mut self, seq: &[T]) -> T {
        seq[self.randbelow(seq.len())]
    }
}

/// numpy's legacy `RandomState` (the global `np.random`), as far as `seed` and `shuffle` go.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LegacyRandomState(Mt19937);

impl LegacyRandomState {
    /// `np.random.seed(seed)` (see the module docs for seeds of 2**32 and more).
    pub fn seeded(seed: u64) -> Self {
        match u32::try_from(seed) {
            Ok(s) => Self(Mt19937::init_genrand(s)),
            Err(_) => Self(Mt19937::init_by_array(&words(seed))),
        }
    }

    /// The generator's words.
    pub fn key(&self) -> &[u32] {
        self.0.key()
    }

    /// `random_interval(max)`: uniform in `0..=max`, `max < 2**32`.
    pub fn random_interval(&mut self, max: u32) -> u32 {
        if max == 0 {
            return 0;
        }
        let mask = u32::MAX >> max.leading_zeros();
        loop {
            let v = self.0.next_u32() & mask;
            if v <= max {
                return v;
            }
        }
    }

    /// `shuffle(x)` of a list.
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        for i in (1..x.len()).rev() {
            let j = self.random_interval(i as u32) as usize;
            x.swap(i, j);
        }
    }
}

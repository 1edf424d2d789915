//! SIMD kernels of the fused backend: a packed-operand f32 GEMM with AVX-512 and AVX2/FMA
//! micro-kernels, and [`vectorized`], which runs element-wise code (the gate passes) compiled
//! for the same instruction set. The crate's only module allowed `unsafe`; every block says why
//! it holds.
//!
//! Why hand-written: the recurrent step multiplies the same `W_hh^T` (`[H, G*H]`) by a new
//! `h` at each of `T` steps. matrixmultiply's `sgemm` (AVX2 kernels) and the `gemm` crate
//! (0.19, no API for a prepacked operand) pack it again on every call; here [`Packed`] is packed
//! once per layer call and shared by every step and thread.
//!
//! The instruction set is detected at run time ([`Level::current`]): AVX-512F where the CPU
//! has it, else AVX2 + FMA, else portable code the compiler vectorizes for the baseline.
//! `RECUR_SIMD=avx2` (or `scalar`) caps it, so the tests can run every path on one machine.
//!
//! Layouts: `Packed` holds `b` (`[k, n]`) as panels of `NR` columns: element `(kk, p*NR + j)`
//! at `p*k*NR + kk*NR + j`, zero past column `n`. The GEMM packs `MR` rows of `a` at a time
//! (`[kc][MR]`, zero past row `m`) and walks every panel of a column block with it.

use std::sync::OnceLock;

use super::mat::Mat;
use super::pool;

/// The instruction set the kernels run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Portable code (the compiler's baseline vectorization).
    Scalar,
    /// AVX2 with FMA (16 ymm registers; micro-tile 6 x 16).
    Avx2,
    /// AVX-512F (32 zmm registers; micro-tile 8 x 32).
    Avx512,
}

impl Level {
    /// The best level this CPU runs.
    pub fn detected() -> Level {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Level::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Level::Avx2;
            }
        }
        Level::Scalar
    }

    /// The level the fused backend uses: [`Level::detected`], capped by `RECUR_SIMD`
    /// (`avx512`, `avx2` or `scalar`; read once per process).
    ///
    /// # Panics
    /// On any other value of `RECUR_SIMD`, naming it.
    pub fn current() -> Level {
        #[cfg(test)]
        if let Some(level) = FORCED.with(std::cell::Cell::get) {
            return level;
        }
        static CURRENT: OnceLock<Level> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            let detected = Level::detected();
            match std::env::var("RECUR_SIMD") {
                Ok(v) => match Level::parse(&v) {
                    Some(cap) => detected.min(cap),
                    None => panic!("RECUR_SIMD={v:?}: expected \"avx512\", \"avx2\" or \"scalar\""),
                },
                Err(_) => detected,
            }
        })
    }

    /// Every level this CPU runs, lowest first (what the tests compare).
    pub fn available() -> Vec<Level> {
        [Level::Scalar, Level::Avx2, Level::Avx512]
            .into_iter()
            .filter(|&l| l <= Level::detected())
            .collect()
    }

    fn parse(s: &str) -> Option<Level> {
        match s {
            "avx512" => Some(Level::Avx512),
            "avx2" => Some(Level::Avx2),
            "scalar" => Some(Level::Scalar),
            _ => None,
        }
    }

    /// The name `RECUR_SIMD` takes.
    pub fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
        }
    }

    /// Rows of a micro-tile.
    const fn mr(self) -> usize {
        match self {
            Level::Scalar => 4,
            Level::Avx2 => 6,
            Level::Avx512 => 8,
        }
    }

    /// Columns of a micro-tile (a panel of [`Packed`]).
    const fn nr(self) -> usize {
        match self {
            Level::Scalar => 8,
            Level::Avx2 => 16,
            Level::Avx512 => 32,
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Unit tests: the level [`Level::current`] returns on this thread ([`with_level`]).
    static FORCED: std::cell::Cell<Option<Level>> = const { std::cell::Cell::new(None) };
}

/// Unit tests: runs `f` with [`Level::current`] returning `level` on this thread (the fused
/// kernels read it once per layer call, on the calling thread).
#[cfg(test)]
pub(crate) fn with_level<R>(level: Level, f: impl FnOnce() -> R) -> R {
    let old = FORCED.with(|c| c.replace(Some(level)));
    let out = f();
    FORCED.with(|c| c.set(old));
    out
}

/// Depth of a packed block of `a` (`MR x KC` floats stay in L1).
const KC: usize = 256;
/// Columns of `b` walked per packed block of `a` (`KC x NC` floats of `b` stay in L2).
const NC: usize = 512;
/// Rows of `a` packed at once (`MC x KC` floats stay in L2). A transposed `a` (the weight
/// gradients' `dG^T`) is read along its rows this way, not `MR` floats from each of `KC` rows.
const MC: usize = 128;

/// Runs `f` inside a function compiled for `level` (AVX-512 / AVX2+FMA), so that the
/// element-wise loops it inlines (the gate passes, `math`'s `#[inline(always)]` functions)
/// are vectorized for that instruction set. Mark the closure `#[inline(always)]`: it is
/// instantiated once per level, and a closure LLVM does not inline runs as baseline code.
#[inline(always)]
pub fn vectorized<R>(level: Level, f: impl FnOnce() -> R) -> R {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Level::Avx512` is only ever produced where the CPU reports avx512f
        // (`Level::detected`, and `current`/`available` never exceed it).
        Level::Avx512 => unsafe { x86::run_avx512(f) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, `Level::Avx2` only where avx2 and fma are reported.
        Level::Avx2 => unsafe { x86::run_avx2(f) },
        _ => f(),
    }
}

/// `b` (`[k, n]`) packed in panels of the level's `NR` columns, kept for many products.
pub struct Packed {
    data: Vec<f32>,
    k: usize,
    n: usize,
    level: Level,
}

impl Packed {
    /// Packs `b` for GEMMs at `level` (a pool buffer, every element written).
    pub fn new(b: Mat<'_>, level: Level) -> Self {
        Self::stacked(&[b], level)
    }

    /// Packs the matrices of `parts` stacked along `k` (`[k1 + k2 + .., n]`, each part
    /// `[k_i, n]`), so that one GEMM multiplies `[a1 | a2 | ..]` by all of them.
    pub fn stacked(parts: &[Mat<'_>], level: Level) -> Self {
        let nr = level.nr();
        let n = parts.first().map_or(0, |b| b.cols);
        assert!(
            parts.iter().all(|b| b.cols == n),
            "stacked parts have n columns"
        );
        let k: usize = parts.iter().map(|b| b.rows).sum();
        let panels = n.div_ceil(nr);
        let mut data = pool::take(panels * k * nr);
        for p in 0..panels {
            let panel = &mut data[p * k * nr..(p + 1) * k * nr];
            let cols = nr.min(n - p * nr);
            let mut k0 = 0;
            for b in parts {
                let part = &mut panel[k0 * nr..(k0 + b.rows) * nr];
                k0 += b.rows;
                if b.cs == 1 {
                    for (kk, dst) in part.chunks_exact_mut(nr).enumerate() {
                        let src = &b.data[kk * b.rs + p * nr..kk * b.rs + p * nr + cols];
                        dst[..cols].copy_from_slice(src);
                        dst[cols..].fill(0.0);
                    }
                } else if b.rs == 1 {
                    pack_columns(b, p * nr, cols, nr, part);
                } else {
                    for j in 0..nr {
                        if j < cols {
                            let col = (p * nr + j) * b.cs;
                            for kk in 0..b.rows {
                                part[kk * nr + j] = b.data[col + kk * b.rs];
                            }
                        } else {
                            for kk in 0..b.rows {
                                part[kk * nr + j] = 0.0;
                            }
                        }
                    }
                }
            }
        }
        Self { data, k, n, level }
    }
}

/// Panel rows `[k, nr]` (`part`) from columns `first .. first + cols` of `b`, whose columns
/// are contiguous (`rs == 1`: a row-major matrix read transposed, such as `W^T`). Reads each
/// column [`K_BLOCK`] values at a time and writes those rows of the panel whole (columns past
/// `cols` zero); a column-at-a-time loop wrote the panel one element per row, with a bounds
/// check each, and took 22 us per LSTM-64 step weight pack.
fn pack_columns(b: &Mat<'_>, first: usize, cols: usize, nr: usize, part: &mut [f32]) {
    const K_BLOCK: usize = 8;
    const MAX_NR: usize = 32;
    debug_assert!(nr <= MAX_NR && cols <= nr && b.rs == 1);
    let k = b.rows;
    let mut columns: [&[f32]; MAX_NR] = [&[]; MAX_NR];
    for (j, c) in columns.iter_mut().enumerate().take(cols) {
        let at = (first + j) * b.cs;
        *c = &b.data[at..at + k];
    }
    let columns = &columns[..cols];
    let whole = k - k % K_BLOCK;
    for k0 in (0..whole).step_by(K_BLOCK) {
        let mut tile = [[0.0f32; MAX_NR]; K_BLOCK];
        for (j, c) in columns.iter().enumerate() {
            let v: &[f32; K_BLOCK] = c[k0..k0 + K_BLOCK].try_into().expect("K_BLOCK values");
            for (row, &x) in tile.iter_mut().zip(v) {
                row[j] = x;
            }
        }
        for (q, row) in tile.iter().enumerate() {
            part[(k0 + q) * nr..(k0 + q + 1) * nr].copy_from_slice(&row[..nr]);
        }
    }
    for kk in whole..k {
        let dst = &mut part[kk * nr..(kk + 1) * nr];
        for (d, c) in dst.iter_mut().zip(columns) {
            *d = c[kk];
        }
        dst[cols..].fill(0.0);
    }
}

impl Clone for Packed {
    fn clone(&self) -> Self {
        Self {
            data: self.data.clone(),
            ..*self
        }
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Packed([{}, {}], {:?})", self.k, self.n, self.level)
    }
}

impl Drop for Packed {
    fn drop(&mut self) {
        pool::give(std::mem::take(&mut self.data));
    }
}

/// `c <- a b + beta c` with `b` packed and `c` row-major `[a.rows, b.n]` with row stride
/// `c_rs`. With `beta = 0` the old `c` is not read (it may hold anything, NaN included).
pub fn gemm_packed(a: Mat<'_>, b: &Packed, beta: f32, c: &mut [f32], c_rs: usize) {
    let (m, k, n) = (a.rows, a.cols, b.n);
    assert_eq!(k, b.k, "a's columns are b's rows");
    if m == 0 || n == 0 {
        return;
    }
    assert!(c_rs >= n && c.len() >= (m - 1) * c_rs + n, "c is [m, n]");
    if k == 0 {
        for row in c.chunks_mut(c_rs).take(m) {
            for v in &mut row[..n] {
                *v = if beta == 0.0 { 0.0 } else { beta * *v };
            }
        }
        return;
    }
    let level = b.level;
    let (mr, nr) = (level.mr(), level.nr());
    // Every element a kernel reads is written by `pack_a` first.
    let mut apack = pool::take(MC.min(m).div_ceil(mr) * mr * KC.min(k));
    // Each block of `a` is packed once and walked against every column block of `b` (`b` is
    // packed already, so the column blocks only keep the part of it one row block walks in
    // L2).
    for k0 in (0..k).step_by(KC) {
        let kc = KC.min(k - k0);
        let beta = if k0 == 0 { beta } else { 1.0 };
        for ic in (0..m).step_by(MC) {
            let mc = MC.min(m - ic);
            let blocks = mc.div_ceil(mr);
            pack_a(a, ic, mc, k0, kc, mr, &mut apack[..blocks * kc * mr]);
            for jc in (0..n).step_by(NC) {
                let nc = NC.min(n - jc);
                for ib in 0..blocks {
                    let i0 = ic + ib * mr;
                    let rows = mr.min(m - i0);
                    let ap = &apack[ib * kc * mr..(ib + 1) * kc * mr];
                    for j0 in (jc..jc + nc).step_by(nr) {
                        let cols = nr.min(n - j0);
                        let p = j0 / nr;
                        let bp = &b.data[p * k * nr + k0 * nr..p * k * nr + (k0 + kc) * nr];
                        let tile = Tile {
                            c: &mut c[i0 * c_rs + j0..],
                            rs: c_rs,
                            rows,
                            cols,
                            beta,
                        };
                        kernel(level, kc, ap, bp, tile);
                    }
                }
            }
        }
    }
    pool::give(apack);
}

/// `c <- a b + beta c` (packs `b` for this one product).
pub(crate) fn gemm(level: Level, a: Mat<'_>, b: Mat<'_>, beta: f32, c: &mut [f32], c_rs: usize) {
    debug_assert_eq!(a.cols, b.rows);
    if a.rows == 0 || b.cols == 0 {
        return;
    }
    gemm_packed(a, &Packed::new(b, level), beta, c, c_rs);
}

/// Rows `ic .. ic + mc`, columns `k0 .. k0 + kc` of `a` as blocks of `mr` rows, each
/// `[kc][mr]` (block `ib` at `ib * kc * mr`), zero past row `mc`. Reads `a` along whichever of
/// its axes is contiguous.
fn pack_a(a: Mat<'_>, ic: usize, mc: usize, k0: usize, kc: usize, mr: usize, out: &mut [f32]) {
    match mr {
        8 => pack_a_mr::<8>(a, ic, mc, k0, kc, out),
        6 => pack_a_mr::<6>(a, ic, mc, k0, kc, out),
        4 => pack_a_mr::<4>(a, ic, mc, k0, kc, out),
        _ => unreachable!("micro-tiles have 4, 6 or 8 rows"),
    }
}

/// [`pack_a`] with `MR` known to the compiler: each packed `k` step (`MR` floats) is written
/// whole, from `MR` row cursors or one contiguous run of a transposed `a` (the weight
/// gradients' `dG^T`), without a `memcpy` call per step.
fn pack_a_mr<const MR: usize>(
    a: Mat<'_>,
    ic: usize,
    mc: usize,
    k0: usize,
    kc: usize,
    out: &mut [f32],
) {
    for (ib, block) in out.chunks_exact_mut(kc * MR).enumerate() {
        let i0 = ic + ib * MR;
        let rows = MR.min(mc - ib * MR);
        let steps = block.chunks_exact_mut(MR);
        if rows == MR && a.cs == 1 {
            let src: [&[f32]; MR] = std::array::from_fn(|r| {
                let at = (i0 + r) * a.rs + k0;
                &a.data[at..at + kc]
            });
            for (kk, d) in steps.enumerate() {
                for (v, s) in d.iter_mut().zip(&src) {
                    *v = s[kk];
                }
            }
        } else if rows == MR && a.rs == 1 {
            for (kk, d) in steps.enumerate() {
                let at = (k0 + kk) * a.cs + i0;
                let d: &mut [f32; MR] = d.try_into().expect("a packed step is MR floats");
                *d = a.data[at..at + MR]
                    .try_into()
                    .expect("MR contiguous floats");
            }
        } else {
            for (kk, d) in steps.enumerate() {
                for (r, v) in d.iter_mut().enumerate() {
                    *v = if r < rows {
                        a.data[(i0 + r) * a.rs + (k0 + kk) * a.cs]
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// The part of `c` one micro-tile writes: `rows x cols` from `c[0]` with row stride `rs`.
struct Tile<'a> {
    c: &'a mut [f32],
    rs: usize,
    rows: usize,
    cols: usize,
    beta: f32,
}

impl Tile<'_> {
    /// Writes an `mr x nr` result (row-major in `acc`) into the tile's valid part.
    fn store(self, acc: &[f32], nr: usize) {
        for r in 0..self.rows {
            let dst = &mut self.c[r * self.rs..r * self.rs + self.cols];
            let src = &acc[r * nr..r * nr + self.cols];
            if self.beta == 0.0 {
                dst.copy_from_slice(src);
            } else {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = s + self.beta * *d;
                }
            }
        }
    }
}

fn kernel(level: Level, kc: usize, a: &[f32], b: &[f32], tile: Tile<'_>) {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Level::Avx512` only where the CPU reports avx512f (see `vectorized`).
        // A tile of at most half the rows (a 4-row block of a small minibatch, the last rows
        // of a GEMM) runs the half-height kernel: no FMAs on the zero rows of its packed `a`.
        Level::Avx512 => unsafe {
            if tile.rows <= Level::Avx512.mr() / 2 {
                x86::kernel_avx512::<{ Level::Avx512.mr() / 2 }>(kc, a, b, tile)
            } else {
                x86::kernel_avx512::<{ Level::Avx512.mr() }>(kc, a, b, tile)
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Level::Avx2` only where the CPU reports avx2 and fma.
        Level::Avx2 => unsafe {
            if tile.rows <= Level::Avx2.mr() / 2 {
                x86::kernel_avx2::<{ Level::Avx2.mr() / 2 }>(kc, a, b, tile)
            } else {
                x86::kernel_avx2::<{ Level::Avx2.mr() }>(kc, a, b, tile)
            }
        },
        _ => kernel_scalar(kc, a, b, tile),
    }
}

/// The portable micro-kernel (4 x 8).
fn kernel_scalar(kc: usize, a: &[f32], b: &[f32], tile: Tile<'_>) {
    const MR: usize = Level::Scalar.mr();
    const NR: usize = Level::Scalar.nr();
    let mut acc = [0.0f32; MR * NR];
    for (av, bv) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        for r in 0..MR {
            for j in 0..NR {
                acc[r * NR + j] += av[r] * bv[j];
            }
        }
    }
    tile.store(&acc, NR);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Level, Tile};

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    pub(super) fn run_avx512<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn run_avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// A micro-kernel of `ROWS x NR` floats on `W`-float vectors (`ROWS` = `MR`, or `MR / 2`
    /// for a tile of at most that many rows; `a` is packed `MR` floats per `k` either way):
    /// `2 * ROWS` accumulators, two `b` loads and `ROWS` broadcasts per `k`. A full tile is
    /// stored in place (`beta` added), a partial one through [`Tile::store`].
    macro_rules! micro_kernel {
        ($(#[$doc:meta])* $name:ident, $features:literal, $level:expr, $w:literal,
         $zero:ident, $load:ident, $set1:ident, $fmadd:ident, $store:ident) => {
            $(#[$doc])*
            #[target_feature(enable = $features)]
            pub(super) fn $name<const ROWS: usize>(
                kc: usize,
                a: &[f32],
                b: &[f32],
                tile: Tile<'_>,
            ) {
                const MR: usize = $level.mr();
                const NR: usize = $level.nr();
                const W: usize = $w;
                assert!(
                    a.len() >= kc * MR && b.len() >= kc * NR,
                    "packed operands hold kc steps"
                );
                assert!(
                    ROWS <= MR && tile.rows <= ROWS,
                    "the tile's rows fit the kernel"
                );
                let mut acc = [[$zero(); 2]; ROWS];
                let (ap, bp) = (a.as_ptr(), b.as_ptr());
                for kk in 0..kc {
                    // SAFETY: kk < kc and r < ROWS <= MR, and a holds kc * MR, b kc * NR
                    // floats (asserted above); the loads are unaligned.
                    unsafe {
                        let b0 = $load(bp.add(kk * NR));
                        let b1 = $load(bp.add(kk * NR + W));
                        for (r, row) in acc.iter_mut().enumerate() {
                            let av = $set1(*ap.add(kk * MR + r));
                            row[0] = $fmadd(av, b0, row[0]);
                            row[1] = $fmadd(av, b1, row[1]);
                        }
                    }
                }
                let full = tile.rows == ROWS && tile.cols == NR;
                if full && tile.c.len() >= (ROWS - 1) * tile.rs + NR {
                    let cp = tile.c.as_mut_ptr();
                    let beta = $set1(tile.beta);
                    for (r, row) in acc.iter().enumerate() {
                        for (half, &v) in row.iter().enumerate() {
                            // SAFETY: r < ROWS and half * W + W <= NR, and c holds
                            // (ROWS - 1) * rs + NR floats (checked above), so the W floats at
                            // r * rs + half * W are in c.
                            unsafe {
                                let at = cp.add(r * tile.rs + half * W);
                                let out = if tile.beta == 0.0 {
                                    v
                                } else {
                                    $fmadd(beta, $load(at), v)
                                };
                                $store(at, out);
                            }
                        }
                    }
                } else {
                    let mut out = [0.0f32; MR * NR];
                    for (r, row) in acc.iter().enumerate() {
                        for (half, &v) in row.iter().enumerate() {
                            // SAFETY: r * NR + half * W + W <= ROWS * NR <= MR * NR, inside
                            // `out`.
                            unsafe { $store(out.as_mut_ptr().add(r * NR + half * W), v) };
                        }
                    }
                    tile.store(&out, NR);
                }
            }
        };
    }

    micro_kernel!(
        /// 8 x 32: 16 zmm accumulators, eight broadcasts per `k` (4 x 32 for 4 rows or fewer).
        kernel_avx512,
        "avx512f",
        Level::Avx512,
        16,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        _mm512_storeu_ps
    );

    micro_kernel!(
        /// 6 x 16: 12 ymm accumulators, six broadcasts per `k` (3 x 16 for 3 rows or fewer).
        kernel_avx2,
        "avx2,fma",
        Level::Avx2,
        8,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_set1_ps,
        _mm256_fmadd_ps,
        _mm256_storeu_ps
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// `a b + beta c` in f64, the plain triple loop.
    fn reference(a: Mat<'_>, b: Mat<'_>, beta: f32, c: &[f32], c_rs: usize) -> Vec<f64> {
        let mut out = Vec::new();
        for i in 0..a.rows {
            for j in 0..b.cols {
                let mut s = f64::from(beta) * f64::from(c[i * c_rs + j]);
                for k in 0..a.cols {
                    s += f64::from(a.data[i * a.rs + k * a.cs])
                        * f64::from(b.data[k * b.rs + j * b.cs]);
                }
                out.push(s);
            }
        }
        out
    }

    /// Every level, ragged edges (m, n not multiples of the tile, k past one `KC` block,
    /// n past one `NC` block, m past one `MC` block), transposed operands, strided output, beta 0 (NaN in `c` not
    /// read) and 1, and a packed `b` reused for several `a`.
    #[test]
    fn every_level_matches_the_triple_loop() {
        for level in Level::available() {
            for &(m, k, n) in &[
                (1, 1, 1),
                (7, 3, 5),
                (13, 300, 37),
                (64, 256, 1024 + 40),
                (300, 40, 70),
                (9, 17, 600),
                // Whole tiles of the half-height kernels (AVX-512: 4 rows, AVX2: 3).
                (4, 33, 64),
                (3, 20, 48),
            ] {
                for transposed in [false, true] {
                    let a_data = random(m * k, 1);
                    let b_data = random(k * n, 2);
                    let a = if transposed {
                        Mat::rows(&a_data, k, m).t()
                    } else {
                        Mat::rows(&a_data, m, k)
                    };
                    let b = if transposed {
                        Mat::rows(&b_data, n, k).t()
                    } else {
                        Mat::rows(&b_data, k, n)
                    };
                    let c_rs = n + 3;
                    for beta in [0.0f32, 1.0] {
                        let init = random(m * c_rs, 3);
                        let mut c = if beta == 0.0 {
                            vec![f32::NAN; m * c_rs]
                        } else {
                            init.clone()
                        };
                        let want = reference(a, b, beta, &init, c_rs);
                        let packed = Packed::new(b, level);
                        gemm_packed(a, &packed, beta, &mut c, c_rs);
                        for i in 0..m {
                            for j in 0..n {
                                let (got, w) = (c[i * c_rs + j], want[i * n + j]);
                                assert!(
                                    (f64::from(got) - w).abs() <= 1e-4 * (1.0 + w.abs()),
                                    "{level:?} {m}x{k}x{n} t={transposed} beta={beta} \
                                     ({i}, {j}): {got} vs {w}"
                                );
                            }
                            // The stride padding is not written.
                            for j in n..c_rs {
                                let pad = c[i * c_rs + j];
                                assert!(
                                    pad.to_bits() == f32::NAN.to_bits()
                                        || pad == init[i * c_rs + j]
                                );
                            }
                        }
                        // The same packed b again, another a.
                        let a2_data = random(m * k, 4);
                        let a2 = Mat::rows(&a2_data, m, k);
                        let want2 = reference(a2, b, 0.0, &init, c_rs);
                        gemm_packed(a2, &packed, 0.0, &mut c, c_rs);
                        for i in 0..m {
                            for j in 0..n {
                                let (got, w) = (c[i * c_rs + j], want2[i * n + j]);
                                assert!((f64::from(got) - w).abs() <= 1e-4 * (1.0 + w.abs()));
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn levels_are_ordered_and_named() {
        let all = Level::available();
        assert_eq!(all[0], Level::Scalar);
        assert_eq!(*all.last().unwrap(), Level::detected());
        assert!(Level::current() <= Level::detected());
        for l in all {
            assert_eq!(Level::parse(l.name()), Some(l));
        }
        assert_eq!(Level::parse("sse"), None);
        // A k = 0 product scales c by beta.
        let mut c = [2.0f32; 4];
        let packed = Packed::new(Mat::rows(&[], 0, 2), Level::current());
        gemm_packed(Mat::rows(&[], 2, 0), &packed, 0.5, &mut c, 2);
        assert_eq!(c, [1.0; 4]);
    }
}

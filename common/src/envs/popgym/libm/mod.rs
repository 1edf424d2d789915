//! numpy's `x**2` on float64 and float32 scalars, bit for bit. numpy's scalar power (its
//! `scalarmath` `double_power`/`float_power`) calls the C library's `pow`/`powf` (only array
//! `**` 2 goes through `fast_scalar_power`'s `square`), and glibc's (2.28 and later: the Arm
//! optimized-routines algorithms) are not correctly rounded: they differ from `x * x` in the
//! last place about once in 1,200 calls. Pendulum's cost `angle_normalize(th)**2 +
//! 0.1 * thdot**2 + 0.001 * u**2` would then differ from numpy's.
//!
//! [`pow_square`] ports glibc's `pow(x, 2.0)` (`sysdeps/ieee754/dbl-64/e_pow.c`, tables
//! `e_pow_log_data.c` and `e_exp_data.c`) as its x86-64 FMA build computes it; see there.
//!
//! [`powf_square`] ports glibc's `powf(x, 2.0f)` (`sysdeps/ieee754/flt-32/e_powf.c` with its
//! data tables `powf_log2_data.c` and `e_exp2f_data.c`; the same code as musl's). It equals
//! glibc's `powf(x, 2.0f)` for every float32 in `[-2, 2]` (checked exhaustively against
//! glibc 2.36, the plain and the FMA build alike: the two agree there).

mod pow_data;

use pow_data::{
    EXP_INV_LN2_N, EXP_NEG_LN2_HI_N, EXP_NEG_LN2_LO_N, EXP_POLY, EXP_SHIFT, EXP_TAB, LN2_HI,
    LN2_LO, LOG_POLY, LOG_TAB,
};

/// `__powf_log2_data.tab`: `(invc, logc)` for 16 subintervals, as IEEE bit patterns.
const LOG2_TAB: [(u64, u64); 16] = [
    (0x3ff661ec79f8f3be, 0xbfdefec65b963019),
    (0x3ff571ed4aaf883d, 0xbfdb0b6832d4fca4),
    (0x3ff49539f0f010b0, 0xbfd7418b0a1fb77b),
    (0x3ff3c995b0b80385, 0xbfd39de91a6dcf7b),
    (0x3ff30d190c8864a5, 0xbfd01d9bf3f2b631),
    (0x3ff25e227b0b8ea0, 0xbfc97c1d1b3b7af0),
    (0x3ff1bb4a4a1a343f, 0xbfc2f9e393af3c9f),
    (0x3ff12358f08ae5ba, 0xbfb960cbbf788d5c),
    (0x3ff0953f419900a7, 0xbfaa6f9db6475fce),
    (0x3ff0000000000000, 0x0000000000000000),
    (0x3fee608cfd9a47ac, 0x3fb338ca9f24f53d),
    (0x3feca4b31f026aa0, 0x3fc476a9543891ba),
    (0x3feb2036576afce6, 0x3fce840b4ac4e4d2),
    (0x3fe9c2d163a1aa2d, 0x3fd40645f0c6651c),
    (0x3fe886e6037841ed, 0x3fd88e9c2c1b9ff8),
    (0x3fe767dcf5534862, 0x3fdce0a44eb17bcc),
];

/// `__powf_log2_data.poly`.
const LOG2_POLY: [u64; 5] = [
    0x3fd27616c9496e0b,
    0xbfd71969a075c67a,
    0x3fdec70a6ca7badd,
    0xbfe7154748bef6c8,
    0x3ff71547652ab82b,
];

/// `__exp2f_data.tab`: `uint(2^(i/32)) - (i << 47)`.
const EXP2_TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// `__exp2f_data.poly`.
const EXP2_POLY: [u64; 3] = [0x3fac6af84b912394, 0x3fcebfce50fac4f3, 0x3fe62e42ff0c52d6];

/// `__exp2f_data.shift_scaled`: `0x1.8p52 / 32`.
const EXP2_SHIFT: u64 = 0x42e8000000000000;

fn d(bits: u64) -> f64 {
    f64::from_bits(bits)
}

/// glibc's `powf(x, 2.0f)`: numpy's `np.float32(x) ** 2`. Exact for every finite `x` with
/// `|x| <= 2` (see the module docs); for larger `|x|` it follows the same code, whose
/// overflow branch (`|x| >= 2^63`) is not ported and returns infinity.
pub(crate) fn powf_square(x: f32) -> f32 {
    const Y: f64 = 2.0;
    let mut ix = x.to_bits();
    if ix.wrapping_sub(0x0080_0000) >= 0x7f80_0000 - 0x0080_0000 {
        // Zero, subnormal, negative, infinite or NaN x.
        if ix.wrapping_mul(2).wrapping_sub(1) >= 2 * 0x7f80_0000 - 1 {
            return x * x; // +-0, +-inf, NaN.
        }
        // Finite x < 0: y = 2 is an even integer, so the sign drops out.
        ix &= 0x7fff_ffff;
        if ix < 0x0080_0000 {
            // Normalize subnormal x so the exponent becomes negative.
            ix = (f32::from_bits(ix) * f32::from_bits(0x4b00_0000)).to_bits() & 0x7fff_ffff;
            ix = ix.wrapping_sub(23 << 23);
        }
    }
    // log2_inline(ix): x = 2^k z with z in [OFF, 2 OFF).
    let tmp = ix.wrapping_sub(0x3f33_0000);
    let i = ((tmp >> 19) % 16) as usize;
    let top = tmp & 0xff80_0000;
    let iz = ix.wrapping_sub(top);
    let k = (top as i32) >> 23;
    let (invc, logc) = (d(LOG2_TAB[i].0), d(LOG2_TAB[i].1));
    let z = f64::from(f32::from_bits(iz));
    let a = LOG2_POLY.map(d);
    let r = z * invc - 1.0;
    let y0 = logc + f64::from(k);
    let r2 = r * r;
    let y = a[0] * r + a[1];
    let p = a[2] * r + a[3];
    let r4 = r2 * r2;
    let q = a[4] * r + y0;
    let q = p * r2 + q;
    let logx = y * r4 + q;
    let ylogx = Y * logx;
    if (ylogx.to_bits() >> 47 & 0xffff) >= 126f64.to_bits() >> 47 {
        if ylogx > d(0x405fffffffd1d571) {
            return f32::INFINITY;
        }
        if ylogx <= -150.0 {
            return 0.0;
        }
    }
    // exp2_inline(ylogx, 0): x = k/32 + r with |r| <= 1/64.
    let c = EXP2_POLY.map(d);
    let shift = d(EXP2_SHIFT);
    let kd = ylogx + shift;
    let ki = kd.to_bits();
    let kd = kd - shift;
    let r = ylogx - kd;
    let t = EXP2_TAB[(ki % 32) as usize].wrapping_add(ki << 47);
    let s = d(t);
    let z = c[0] * r + c[1];
    let r2 = r * r;
    let y = c[2] * r + 1.0;
    let y = z * r2 + y;
    (y * s) as f32
}

/// numpy's `np.float64(x) ** 2`: glibc's `pow(x, 2.0)`, bit for bit, for `2^-369 < |x| <
/// 2^369` (outside that range, where glibc takes its overflow/underflow `specialcase`, not
/// ported, it returns `x * x`).
///
/// glibc builds `pow` twice on x86-64 and its ifunc picks `__pow_fma` (compiled with `-mfma
/// -mavx2`, so `__FP_FAST_FMA` holds and GCC fuses each `a * b + c`) on CPUs with FMA and AVX2,
/// the plain build elsewhere; the two differ in the last place about once in 1,300 calls. This
/// picks the same one for the CPU it runs on (aarch64's glibc is always the fused one), so
/// it matches the numpy that runs on the same machine.
pub(crate) fn pow_square(x: f64) -> f64 {
    let p = pow_square_impl(x, glibc_pow_is_fused());
    if p.is_nan() {
        x * x
    } else {
        p
    }
}

/// `a * b + c`, fused in glibc's FMA build (GCC contracts it there), rounded twice otherwise.
#[inline]
fn madd(fma: bool, a: f64, b: f64, c: f64) -> f64 {
    if fma {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `log_inline`: `(hi, lo)` with `hi + lo = log(x)`, `ix` the bits of a positive normal `x`.
fn log_inline(ix: u64, fma: bool) -> (f64, f64) {
    const OFF: u64 = 0x3fe6_9555_0000_0000;
    let tmp = ix.wrapping_sub(OFF);
    let i = ((tmp >> 45) % 128) as usize;
    let k = (tmp as i64) >> 52;
    let iz = ix.wrapping_sub(tmp & (0xfff << 52));
    let z = d(iz);
    let kd = k as f64;
    let [invc, logc, logctail] = LOG_TAB[i].map(d);
    let a = LOG_POLY.map(d);
    let (r, rhi, rlo) = if fma {
        (z.mul_add(invc, -1.0), 0.0, 0.0)
    } else {
        let zhi = d(iz.wrapping_add(1 << 31) & (u64::MAX << 32));
        let zlo = z - zhi;
        let rhi = zhi * invc - 1.0;
        let rlo = zlo * invc;
        (rhi + rlo, rhi, rlo)
    };
    let t1 = madd(fma, kd, d(LN2_HI), logc);
    let t2 = t1 + r;
    let lo1 = madd(fma, kd, d(LN2_LO), logctail);
    let lo2 = t1 - t2 + r;
    let ar = a[0] * r;
    let ar2 = r * ar;
    let ar3 = r * ar2;
    let (hi, lo3, lo4) = if fma {
        let hi = t2 + ar2;
        (hi, ar.mul_add(r, -ar2), t2 - hi + ar2)
    } else {
        let arhi = a[0] * rhi;
        let arhi2 = rhi * arhi;
        let hi = t2 + arhi2;
        (hi, rlo * (ar + arhi), t2 - hi + arhi2)
    };
    let q = madd(fma, r, a[6], a[5]);
    let q = madd(fma, ar2, q, madd(fma, r, a[4], a[3]));
    let q = madd(fma, ar2, q, madd(fma, r, a[2], a[1]));
    let lo = madd(fma, ar3, q, lo1 + lo2 + lo3 + lo4);
    let y = hi + lo;
    (y, hi - y + lo)
}

/// `exp_inline(x, xtail, 0)` for `|x| < 512`.
fn exp_inline(x: f64, xtail: f64, fma: bool) -> f64 {
    let top12 = |v: f64| (v.to_bits() >> 52) as u32;
    let abstop = top12(x) & 0x7ff;
    if abstop.wrapping_sub(top12(f64::from_bits(0x3c90_0000_0000_0000))) // 0x1p-54
        >= top12(512.0) - 0x3c9
    {
        if abstop.wrapping_sub(0x3c9) >= 0x8000_0000 {
            return 1.0 + x; // Tiny x.
        }
        // |x| >= 512 (x^2 overflows or underflows, or nearly): glibc's `specialcase`, not
        // ported; `pow_square` falls back to the product.
        return f64::NAN;
    }
    let kd = madd(fma, d(EXP_INV_LN2_N), x, d(EXP_SHIFT));
    let ki = kd.to_bits();
    let kd = kd - d(EXP_SHIFT);
    let r = madd(
        fma,
        kd,
        d(EXP_NEG_LN2_LO_N),
        madd(fma, kd, d(EXP_NEG_LN2_HI_N), x),
    );
    let r = r + xtail;
    let idx = 2 * (ki % 128) as usize;
    let top = ki << 45;
    let tail = d(EXP_TAB[idx]);
    let sbits = EXP_TAB[idx + 1].wrapping_add(top);
    let [c2, c3, c4, c5] = EXP_POLY.map(d);
    let r2 = r * r;
    let tmp = madd(
        fma,
        r2 * r2,
        madd(fma, r, c5, c4),
        madd(fma, r2, madd(fma, r, c3, c2), tail + r),
    );
    let scale = d(sbits);
    madd(fma, scale, tmp, scale)
}

/// Whether this machine's glibc runs the FMA build of `pow` (see [`pow_square`]).
fn glibc_pow_is_fused() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("fma") && std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        cfg!(target_arch = "aarch64")
    }
}

/// glibc's `__pow(x, 2.0)`: with `fma`, its FMA build; without, the plain one.
fn pow_square_impl(x: f64, fma: bool) -> f64 {
    let mut ix = x.to_bits();
    let topx = ix >> 52;
    if topx.wrapping_sub(1) >= 0x7ff - 1 {
        if ix.wrapping_mul(2).wrapping_sub(1) >= 2 * f64::INFINITY.to_bits() - 1 {
            return x * x; // +-0, +-inf, NaN.
        }
        ix &= 0x7fff_ffff_ffff_ffff;
        if ix >> 52 == 0 {
            ix = (x * d(0x4330_0000_0000_0000)).to_bits() & 0x7fff_ffff_ffff_ffff;
            ix = ix.wrapping_sub(52 << 52);
        }
    }
    let (hi, lo) = log_inline(ix, fma);
    let (ehi, elo) = if fma {
        (2.0 * hi, 2.0 * lo)
    } else {
        let lhi = d(hi.to_bits() & (u64::MAX << 27));
        let llo = hi - lhi + lo;
        (2.0 * lhi, 0.0 * lhi + 2.0 * llo)
    };
    exp_inline(ehi, elo, fma)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powf_square_special_values() {
        assert_eq!(powf_square(0.0).to_bits(), 0);
        assert_eq!(powf_square(-0.0).to_bits(), 0);
        assert_eq!(powf_square(2.0), 4.0);
        assert_eq!(powf_square(-2.0), 4.0);
        assert_eq!(powf_square(1.0), 1.0);
        assert_eq!(powf_square(-1.5), 2.25);
        assert_eq!(powf_square(f32::INFINITY), f32::INFINITY);
        assert!(powf_square(f32::NAN).is_nan());
        assert_eq!(powf_square(1e-30), 0.0);
    }

    /// Values where glibc's `powf(x, 2)` is not `x * x` (found against glibc 2.36).
    #[test]
    fn powf_square_is_glibcs_not_the_product() {
        let mut differ = 0;
        for i in 0..200_000u32 {
            let x = f32::from_bits(0x3f80_0000 + i * 41);
            if powf_square(x).to_bits() != (x * x).to_bits() {
                differ += 1;
                assert_eq!(powf_square(x).to_bits().abs_diff((x * x).to_bits()), 1);
            }
        }
        assert!(differ > 10, "{differ}");
    }

    #[test]
    fn pow_square_special_values() {
        for fma in [false, true] {
            assert_eq!(pow_square_impl(0.0, fma).to_bits(), 0);
            assert_eq!(pow_square_impl(-0.0, fma).to_bits(), 0);
            assert_eq!(pow_square_impl(1.0, fma), 1.0);
            assert_eq!(pow_square_impl(-3.0, fma), 9.0);
            assert_eq!(pow_square_impl(0.5, fma), 0.25);
            assert_eq!(pow_square_impl(f64::NEG_INFINITY, fma), f64::INFINITY);
            assert!(pow_square_impl(f64::NAN, fma).is_nan());
        }
        assert_eq!(pow_square(1e300), f64::INFINITY);
        assert_eq!(pow_square(-8.0), 64.0);
    }

    /// `(x, glibc FMA build, glibc plain build)` as bits, from glibc 2.36 (`math.pow(x, 2.0)`,
    /// the plain build forced with `GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2,-FMA`); each differs
    /// from `x * x` in at least one build.
    #[test]
    fn pow_square_is_glibcs_not_the_product() {
        let cases: [(u64, u64, u64); 6] = [
            (0xc01d66b52edacb02, 0x404b03720bf91d11, 0x404b03720bf91d12),
            (0x3fff04c665807c28, 0x400e11411b105a05, 0x400e11411b105a04),
            (0xbff1d9e120ade53e, 0x3ff3ea955c679b6b, 0x3ff3ea955c679b6c),
            (0xc00668d0a19598b9, 0x401f62ec5f306c50, 0x401f62ec5f306c50),
            (0xc008d521fbe417c2, 0x4023453e86638765, 0x4023453e86638764),
            (0xc01e5e5307141964, 0x404cd1f1b5e6b26a, 0x404cd1f1b5e6b26a),
        ];
        for (x, fused, plain) in cases {
            let x = f64::from_bits(x);
            assert_eq!(pow_square_impl(x, true).to_bits(), fused, "{x} fma");
            assert_eq!(pow_square_impl(x, false).to_bits(), plain, "{x} plain");
            let product = (x * x).to_bits();
            assert!(product != fused || product != plain, "{x}");
        }
    }
}

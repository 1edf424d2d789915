//! The cells' element-wise math on the host, shared by the fused kernel
//! ([`fused`](super::fused)) and the actor's inference path (common's `policy::inference`):
//! vectorizable `exp`, `sigmoid` and `tanh`, and the LSTM, GRU and minGRU state updates.
//!
//! libm's scalar `expf` is a function call per element; the cells evaluate `G*H` activations per
//! row and step, as many as the GEMM has output elements, so a call each would cost as much as
//! the GEMM. These are straight-line `f32` code (Cephes' `expf`: range reduction by `ln 2` and a
//! degree-5 polynomial, about 1 ulp) that the compiler vectorizes over a slice.

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split in a part exact in `f32` and the rest (Cody-Waite reduction).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Adding `1.5 * 2^23` rounds a float of magnitude below `2^22` to an integer in the low
/// mantissa bits.
const ROUND: f32 = 12_582_912.0;

/// How the polynomials multiply and add: [`TwoRoundings`] (`a * b + c`, what baseline x86-64
/// code runs at full speed: the actor's inference path) or [`OneRounding`] (a fused
/// multiply-add: one instruction in code compiled for FMA, the fused kernel's AVX2/AVX-512
/// passes; elsewhere a libm call).
pub trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// `a * b + c`, rounded after the product and after the sum.
pub enum TwoRoundings {}

impl MulAdd for TwoRoundings {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// `a * b + c` rounded once (`f32::mul_add`).
pub enum OneRounding {}

impl MulAdd for OneRounding {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// `e^x` with the multiply-adds of `M`, relative error about `1e-7`; inputs are clamped to
/// `[-87, 88]` (the result stays a normal float).
#[inline(always)]
pub fn exp_with<M: MulAdd>(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let t = M::mul_add(x, LOG2E, ROUND);
    let n = t - ROUND;
    // The integer `n` sits in the low mantissa bits of `t`.
    let k = (t.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let r = M::mul_add(-n, LN2_LO, M::mul_add(-n, LN2_HI, x));
    let r2 = r * r;
    let mut p = 1.987_569_1e-4;
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = M::mul_add(p, r, c);
    }
    let y = M::mul_add(p, r2, r) + 1.0;
    y * f32::from_bits(((k + 127) << 23) as u32)
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_with::<TwoRoundings>(x)
}

/// [`sigmoid`] with the multiply-adds of `M`.
#[inline(always)]
pub fn sigmoid_with<M: MulAdd>(x: f32) -> f32 {
    1.0 / (1.0 + exp_with::<M>(-x))
}

/// `tanh x = 1 - 2 / (e^{2x} + 1)`, absolute error about `1e-7`.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    tanh_with::<TwoRoundings>(x)
}

/// [`tanh`] with the multiply-adds of `M`.
#[inline(always)]
pub fn tanh_with<M: MulAdd>(x: f32) -> f32 {
    1.0 - 2.0 / (exp_with::<M>(2.0 * x) + 1.0)
}

/// The LSTM's new cell state from its input, forget and cell gates (post-activation) and the
/// incoming cell state: `c' = f c + i g` (the output is `o tanh(c')`).
#[inline(always)]
pub fn lstm_cell_state(i: f32, f: f32, g: f32, c: f32) -> f32 {
    f * c + i * g
}

/// The GRU's new hidden state from its update gate `z`, candidate `n` and incoming state `h`:
/// `h' = (1 - z) n + z h`, computed as `n + z (h - n)`.
#[inline(always)]
pub fn gru_hidden(z: f32, n: f32, h: f32) -> f32 {
    n + z * (h - n)
}

/// minGRU's candidate activation `g(v) = v + 0.5` for `v >= 0`, `sigmoid(v)` below
/// (continuous at 0, positive everywhere), with the multiply-adds of `M`.
#[inline(always)]
pub fn mingru_g_with<M: MulAdd>(v: f32) -> f32 {
    if v >= 0.0 {
        v + 0.5
    } else {
        sigmoid_with::<M>(v)
    }
}

/// minGRU's new hidden state from its update gate `z`, candidate `h~` and incoming state `h`:
/// `h' = (1 - z) h + z h~`, computed as `h + z (h~ - h)`.
#[inline(always)]
pub fn mingru_hidden(z: f32, candidate: f32, h: f32) -> f32 {
    h + z * (candidate - h)
}

#[inline(always)]
pub fn sigmoid_in_place<M: MulAdd>(v: &mut [f32]) {
    for x in v {
        *x = sigmoid_with::<M>(*x);
    }
}

#[inline(always)]
pub fn tanh_in_place<M: MulAdd>(v: &mut [f32]) {
    for x in v {
        *x = tanh_with::<M>(*x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activations_match_libm_with<M: MulAdd>() {
        let mut worst = (0.0f64, 0.0f64, 0.0f64);
        for i in -200_000..=200_000 {
            let x = i as f32 * 1e-4 * 3.0; // [-60, 60]
            let e = (x as f64).exp();
            if x.abs() < 80.0 {
                let rel = ((exp_with::<M>(x) as f64 - e) / e).abs();
                worst.0 = worst.0.max(rel);
            }
            let s = 1.0 / (1.0 + (-(x as f64)).exp());
            worst.1 = worst.1.max((sigmoid_with::<M>(x) as f64 - s).abs());
            worst.2 = worst
                .2
                .max((tanh_with::<M>(x) as f64 - (x as f64).tanh()).abs());
        }
        assert!(worst.0 < 3e-7, "exp relative error {}", worst.0);
        assert!(worst.1 < 2e-7, "sigmoid absolute error {}", worst.1);
        assert!(worst.2 < 3e-7, "tanh absolute error {}", worst.2);
        // Saturation without NaN or infinity.
        for x in [-1e30f32, -500.0, -88.0, 88.0, 500.0, 1e30] {
            assert!(
                exp_with::<M>(x).is_finite() && exp_with::<M>(x) >= 0.0,
                "exp({x})"
            );
            assert!((0.0..=1.0).contains(&sigmoid_with::<M>(x)), "sigmoid({x})");
            assert!((-1.0..=1.0).contains(&tanh_with::<M>(x)), "tanh({x})");
        }
        assert_eq!(tanh_with::<M>(1e30), 1.0);
        assert_eq!(tanh_with::<M>(-1e30), -1.0);
        assert!(sigmoid_with::<M>(-1e30) < 1e-37 && sigmoid_with::<M>(1e30) == 1.0);
    }

    /// Both multiply-add flavours (the actor's and the fused kernel's).
    #[test]
    fn activations_match_libm() {
        activations_match_libm_with::<TwoRoundings>();
        activations_match_libm_with::<OneRounding>();
    }

    fn fast_exp_sigmoid_tanh_are_accurate_with<M: MulAdd>() {
        let mut worst = (0.0f64, 0.0f64, 0.0f64);
        let mut x = -30.0f32;
        while x < 30.0 {
            let e = (x as f64).exp();
            worst.0 = worst.0.max(((exp_with::<M>(x) as f64 - e) / e).abs());
            worst.1 = worst
                .1
                .max((sigmoid_with::<M>(x) as f64 - 1.0 / (1.0 + (-x as f64).exp())).abs());
            worst.2 = worst
                .2
                .max((tanh_with::<M>(x) as f64 - (x as f64).tanh()).abs());
            x += 0.001;
        }
        assert!(worst.0 < 5e-7, "exp relative error {}", worst.0);
        assert!(worst.1 < 2e-7, "sigmoid error {}", worst.1);
        assert!(worst.2 < 5e-7, "tanh error {}", worst.2);
        assert_eq!(exp_with::<M>(-200.0), exp_with::<M>(-87.0));
        assert!(exp_with::<M>(200.0).is_finite());
        assert_eq!(tanh_with::<M>(100.0), 1.0);
        assert_eq!(tanh_with::<M>(-100.0), -1.0);
    }

    /// Both multiply-add flavours (the actor's and the fused kernel's).
    #[test]
    fn fast_exp_sigmoid_tanh_are_accurate() {
        fast_exp_sigmoid_tanh_are_accurate_with::<TwoRoundings>();
        fast_exp_sigmoid_tanh_are_accurate_with::<OneRounding>();
    }
}

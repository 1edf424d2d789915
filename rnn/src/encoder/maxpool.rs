//! Max-pooling of NHWC images with stride = kernel (`torch.nn.MaxPool2d(kernel)`), keeping
//! where each maximum came from for the backward.

use super::config::ImageShape;

/// Pools `frames` images `input` (`[frames, H, W, C]`) into `out` (`[frames, H/k, W/k, C]`,
/// sizes rounded down). `argmax` gets, per output value, the index inside its frame of the
/// input it took: the first maximum in the window's row-major order, as torch's CPU kernel
/// picks it (strict `>`; a NaN wins, the last one as in torch).
pub(crate) fn forward(
    input_shape: ImageShape,
    kernel: usize,
    frames: usize,
    input: &[f32],
    out: &mut [f32],
    argmax: &mut [u32],
) {
    let ImageShape {
        height: _,
        width: w,
        channels: c,
    } = input_shape;
    let (oh_n, ow_n) = (input_shape.height / kernel, w / kernel);
    let (in_len, out_len) = (input_shape.len(), oh_n * ow_n * c);
    for f in 0..frames {
        let x = &input[f * in_len..(f + 1) * in_len];
        let y = &mut out[f * out_len..(f + 1) * out_len];
        let arg = &mut argmax[f * out_len..(f + 1) * out_len];
        let windows = y.chunks_exact_mut(c).zip(arg.chunks_exact_mut(c));
        for (o, (y, arg)) in windows.enumerate() {
            let (oh, ow) = (o / ow_n, o % ow_n);
            let corner = (oh * kernel * w + ow * kernel) * c;
            y.copy_from_slice(&x[corner..corner + c]);
            for (a, at) in arg.iter_mut().zip(corner..) {
                *a = at as u32;
            }
            for kh in 0..kernel {
                for kw in 0..kernel {
                    if kh == 0 && kw == 0 {
                        continue;
                    }
                    let at = corner + (kh * w + kw) * c;
                    let xs = &x[at..at + c];
                    for ((yv, av), (&v, i)) in
                        y.iter_mut().zip(arg.iter_mut()).zip(xs.iter().zip(at..))
                    {
                        if v > *yv || v.is_nan() {
                            *yv = v;
                            *av = i as u32;
                        }
                    }
                }
            }
        }
    }
}

/// Adds each output gradient `dy` (`[frames, out_len]`) into `dx` (`[frames, in_len]`) at
/// the input its maximum came from.
pub(crate) fn backward(in_len: usize, dy: &[f32], argmax: &[u32], frames: usize, dx: &mut [f32]) {
    let out_len = dy.len() / frames.max(1);
    for f in 0..frames {
        let dx = &mut dx[f * in_len..(f + 1) * in_len];
        let range = f * out_len..(f + 1) * out_len;
        for (&g, &a) in dy[range.clone()].iter().zip(&argmax[range]) {
            dx[a as usize] += g;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_maximum_wins_and_backward_routes_to_it() {
        // One frame, 2x5x1 (the last column is dropped by the floor), kernel 2.
        let shape = ImageShape::new(2, 5, 1);
        let x = [1.0, 3.0, 2.0, 2.0, 9.0, 3.0, 0.0, 2.0, 1.0, 9.0];
        let (mut y, mut arg) = ([0.0; 2], [0u32; 2]);
        forward(shape, 2, 1, &x, &mut y, &mut arg);
        // Window 0 {1, 3, 3, 0}: the first 3 (index 1). Window 1 {2, 2, 2, 1}: index 2.
        assert_eq!((y, arg), ([3.0, 2.0], [1, 2]));
        let mut dx = [0.0; 10];
        backward(10, &[5.0, -1.0], &arg, 1, &mut dx);
        assert_eq!(dx, [0.0, 5.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    }

    /// The backward against finite differences of `sum(pool(x) * g)` on inputs with distinct
    /// values (away from ties, the pool is linear around `x`).
    #[test]
    fn backward_matches_finite_differences() {
        let shape = ImageShape::new(6, 7, 3);
        let (frames, kernel) = (2, 2);
        let n = frames * shape.len();
        // Distinct values: a permutation of 0..n, scaled.
        let x: Vec<f32> = (0..n).map(|i| ((i * 37) % n) as f32 * 0.25).collect();
        let out_len = (6 / kernel) * (7 / kernel) * 3;
        let g: Vec<f32> = (0..frames * out_len)
            .map(|i| (i % 5) as f32 - 2.0)
            .collect();
        let loss = |x: &[f32]| {
            let mut y = vec![0.0; frames * out_len];
            let mut arg = vec![0; frames * out_len];
            forward(shape, kernel, frames, x, &mut y, &mut arg);
            y.iter().zip(&g).map(|(a, b)| f64::from(a * b)).sum::<f64>()
        };
        let mut y = vec![0.0; frames * out_len];
        let mut arg = vec![0; frames * out_len];
        forward(shape, kernel, frames, &x, &mut y, &mut arg);
        let mut dx = vec![0.0; n];
        backward(shape.len(), &g, &arg, frames, &mut dx);
        let eps = 0.01;
        for i in 0..n {
            let mut xp = x.clone();
            xp[i] += eps;
            let mut xm = x.clone();
            xm[i] -= eps;
            let fd = (loss(&xp) - loss(&xm)) / (2.0 * f64::from(eps));
            assert!(
                (fd - f64::from(dx[i])).abs() < 1e-3,
                "x[{i}]: {fd} vs {}",
                dx[i]
            );
        }
    }
}

//! im2col and col2im for NHWC images: a convolution becomes one GEMM `col [P, K] x W^T
//! [K, out]` (`P` output pixels, `K = kernel * kernel * in_channels` in `(kh, kw, c)` order),
//! and its input gradient a GEMM into `col` followed by [`col2im`].
//!
//! In NHWC, the `kernel * C` values under one kernel row are contiguous in the input, so a row
//! of `col` is `kernel` copies of contiguous runs (clipped where the padding is).

use super::config::{ImageShape, OneHot};

/// Where a convolution reads its input from: the frames themselves (`uint8`, times the scale)
/// or a previous layer's `f32` output; both NHWC.
pub(crate) trait Source: Sync {
    /// Writes `dst.len()` values from element `at` on.
    fn read(&self, at: usize, dst: &mut [f32]);
}

/// `uint8` frames, each value times `scale` on the way in; or, with `onehot`, each pixel's
/// codes as its planes (the first convolution's input then has the planes as channels: `at`
/// counts planes, and a read covers whole pixels).
pub(crate) struct Pixels<'a> {
    pub obs: &'a [u8],
    pub scale: f32,
    pub onehot: Option<&'a OneHot>,
}

impl Source for Pixels<'_> {
    fn read(&self, at: usize, dst: &mut [f32]) {
        match self.onehot {
            None => {
                let src = &self.obs[at..at + dst.len()];
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = f32::from(s) * self.scale;
                }
            }
            Some(h) => {
                let planes = h.source.len();
                debug_assert!(
                    at.is_multiple_of(planes) && dst.len().is_multiple_of(planes),
                    "whole pixels"
                );
                let first = at / planes * h.channels;
                let bytes = &self.obs[first..first + dst.len() / planes * h.channels];
                h.expand(bytes, dst);
            }
        }
    }
}

impl Source for [f32] {
    fn read(&self, at: usize, dst: &mut [f32]) {
        dst.copy_from_slice(&self[at..at + dst.len()]);
    }
}

/// A convolution's geometry: input and output shapes, square kernel, stride and padding.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub input: ImageShape,
    pub output: ImageShape,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
}

impl Geometry {
    /// Columns of `col`: `kernel * kernel * in_channels`.
    pub fn k(&self) -> usize {
        self.kernel * self.kernel * self.input.channels
    }

    /// Rows of `col` per frame: the output pixels.
    pub fn pixels(&self) -> usize {
        self.output.height * self.output.width
    }

    /// For output pixel `(oh, ow)` and kernel row `kh`: the input row, or `None` in the
    /// padding; and the kernel columns `lo..hi` inside the input with the first one's input
    /// column (`iw0 + lo`).
    #[inline]
    fn window(&self, oh: usize, ow: usize, kh: usize) -> Option<(usize, usize, usize, usize)> {
        let ih = (oh * self.stride + kh).checked_sub(self.padding)?;
        if ih >= self.input.height {
            return None;
        }
        let start = ow * self.stride; // iw of kernel column kw is start + kw - padding
        let lo = self.padding.saturating_sub(start);
        let hi = (self.input.width + self.padding)
            .saturating_sub(start)
            .min(self.kernel);
        (lo < hi).then(|| (ih, lo, hi, start + lo - self.padding))
    }
}

/// Rows of `col` (`[frames * pixels, K]`) for frames `first .. first + frames` of `src`.
pub(crate) fn im2col<S: Source + ?Sized>(
    g: &Geometry,
    src: &S,
    first: usize,
    frames: usize,
    col: &mut [f32],
) {
    let (c, k) = (g.input.channels, g.k());
    let run = g.kernel * c;
    let frame_len = g.input.len();
    let mut rows = col[..frames * g.pixels() * k].chunks_exact_mut(k);
    for f in first..first + frames {
        let base = f * frame_len;
        for oh in 0..g.output.height {
            for ow in 0..g.output.width {
                let row = rows.next().expect("col has a row per output pixel");
                for (kh, dst) in row.chunks_exact_mut(run).enumerate() {
                    match g.window(oh, ow, kh) {
                        None => dst.fill(0.0),
                        Some((ih, lo, hi, iw)) => {
                            dst[..lo * c].fill(0.0);
                            dst[hi * c..].fill(0.0);
                            let at = base + (ih * g.input.width + iw) * c;
                            src.read(at, &mut dst[lo * c..hi * c]);
                        }
                    }
                }
            }
        }
    }
}

/// Adds the rows of `col` (`[frames * pixels, K]`, gradients of [`im2col`]'s output) into
/// `dx` (`[frames, H, W, C]`, the input's gradient) at the positions they were read from.
pub(crate) fn col2im(g: &Geometry, col: &[f32], frames: usize, dx: &mut [f32]) {
    let (c, k) = (g.input.channels, g.k());
    let run = g.kernel * c;
    let frame_len = g.input.len();
    let mut rows = col[..frames * g.pixels() * k].chunks_exact(k);
    for f in 0..frames {
        let base = f * frame_len;
        for oh in 0..g.output.height {
            for ow in 0..g.output.width {
                let row = rows.next().expect("col has a row per output pixel");
                for (kh, src) in row.chunks_exact(run).enumerate() {
                    if let Some((ih, lo, hi, iw)) = g.window(oh, ow, kh) {
                        let at = base + (ih * g.input.width + iw) * c;
                        let dst = &mut dx[at..at + (hi - lo) * c];
                        for (d, s) in dst.iter_mut().zip(&src[lo * c..hi * c]) {
                            *d += s;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A direct convolution gathers the same values as im2col, padding included, and col2im
    /// is its adjoint: `<im2col(x), y> = <x, col2im(y)>`.
    #[test]
    fn im2col_matches_direct_indexing_and_col2im_is_its_adjoint() {
        for (h, w, c, kernel, stride, padding) in [
            (5, 4, 2, 3, 1, 1),
            (7, 7, 3, 2, 1, 0),
            (9, 6, 1, 4, 2, 2),
            (3, 3, 2, 3, 3, 2),
        ] {
            let input = ImageShape::new(h, w, c);
            let out = |x: usize| (x + 2 * padding - kernel) / stride + 1;
            let g = Geometry {
                input,
                output: ImageShape::new(out(h), out(w), 1),
                kernel,
                stride,
                padding,
            };
            let frames = 2;
            let x: Vec<f32> = (0..frames * input.len()).map(|i| i as f32 + 1.0).collect();
            let mut col = vec![f32::NAN; frames * g.pixels() * g.k()];
            im2col(&g, x.as_slice(), 0, frames, &mut col);
            let mut at = 0;
            for f in 0..frames {
                for oh in 0..g.output.height {
                    for ow in 0..g.output.width {
                        for kh in 0..kernel {
                            for kw in 0..kernel {
                                for ch in 0..c {
                                    let ih = (oh * stride + kh) as isize - padding as isize;
                                    let iw = (ow * stride + kw) as isize - padding as isize;
                                    let inside = (0..h as isize).contains(&ih)
                                        && (0..w as isize).contains(&iw);
                                    let want = if inside {
                                        x[((f * h + ih as usize) * w + iw as usize) * c + ch]
                                    } else {
                                        0.0
                                    };
                                    assert_eq!(col[at], want, "{h}x{w}x{c} k{kernel} at {at}");
                                    at += 1;
                                }
                            }
                        }
                    }
                }
            }
            let y: Vec<f32> = (0..col.len())
                .map(|i| ((i * 7) % 11) as f32 - 5.0)
                .collect();
            let mut dx = vec![0.0; x.len()];
            col2im(&g, &y, frames, &mut dx);
            let lhs: f64 = col.iter().zip(&y).map(|(a, b)| f64::from(a * b)).sum();
            let rhs: f64 = x.iter().zip(&dx).map(|(a, b)| f64::from(a * b)).sum();
            assert_eq!(lhs, rhs);
        }
    }

    #[test]
    fn pixels_are_scaled() {
        let obs = [0u8, 255, 10];
        let mut dst = [0.0; 2];
        Pixels {
            obs: &obs,
            scale: 0.5,
            onehot: None,
        }
        .read(1, &mut dst);
        assert_eq!(dst, [127.5, 5.0]);
    }

    /// Codes one-hot: channel 0 of 3 codes, channel 1 of 2; a code past its range sets none
    /// of its channel's planes; a read from the second pixel on.
    #[test]
    fn codes_become_their_planes() {
        let onehot = OneHot::new(&[3, 2]);
        let obs = [2u8, 0, 1, 1, 7, 2];
        let mut dst = [9.0; 10];
        Pixels {
            obs: &obs,
            scale: 1.0,
            onehot: Some(&onehot),
        }
        .read(5, &mut dst);
        assert_eq!(
            dst,
            [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "pixel 1: codes (1, 1); pixel 2: (7, 2), both past their ranges"
        );
    }
}

//! CartPole seen through pixels: CartPole-v1's dynamics ([`CartPole`], the gymnasium port)
//! rendered after every reset and step into one small grayscale `u8` frame by a native
//! rasterizer ([`Rasterizer`]), the frame being the whole observation (no velocities, no frame
//! stack: a policy must remember earlier frames to know where the pole is going). Meant for the
//! id `PixelCartPole-v1` (64x64 frames, CartPole-v1's 500-step time limit), registered once
//! environments can observe typed (`u8`, shaped) observations.
//!
//! # The picture
//!
//! Frames are row-major `[H, W]`, row 0 at the top. Pixel `(r, c)` covers `[c, c + 1) x [r, r +
//! 1)`; a shape covers the pixels whose centres `(c + 0.5, r + 0.5)` it contains. Lengths
//! follow gymnasium's CartPole renderer, which maps the world width `2 * x_threshold = 4.8` m
//! onto the frame width: `scale = W / 4.8` pixels a metre (13.33 at `W = 64`).
//!
//! | shape | geometry (pixels; `x`, `theta` from the state) | value |
//! | --- | --- | --- |
//! | background | everything else | [`BACKGROUND`] = 0 |
//! | track | row `floor(3H / 4)`, every column | [`TRACK`] = 80 |
//! | cart | rectangle `0.4 m x 0.24 m` (gymnasium's 50 x 30 of 600), centre `(W / 2 + x * scale, floor(3H / 4) + 0.5)`: on the track | [`CART`] = 255 |
//! | pole | segment of length `1 m * scale` (gymnasium's `2 * length`) from the centre of the cart's top edge, at `theta` from upright (positive: leaning right, towards `+x`), thickened to the pixels within `max(0.04 m * scale, 1)` of it | [`POLE`] = 160 |
//!
//! Drawn in that order, so the cart covers the pole's rounded foot. Parts outside the frame are
//! clipped (a cart at `|x| = 2.4` is cut in half by the frame's edge). At `W = H = 64`: the cart
//! is 6 x 3 pixels, the pole 14 rows tall when upright and 2 pixels thick, and its top moves
//! 13.33 * sin(theta) pixels sideways: 2.65 pixels at theta = 0.2, just inside CartPole's 12°
//! (0.21 rad) termination. Nothing is anti-aliased: a frame is a pure function of `(x, theta,
//! H, W)`. A non-finite `x` or `theta` draws the track alone.
//!
//! A 20 x 48 frame, cart at `x = 0.6`, pole at `theta = 0.2` (`.` background, `-` track, `#`
//! cart, `o` pole; rows 4 to 16 shown, the others are background):
//!
//! ```
//! use common::envs::pixel_cartpole::{Rasterizer, BACKGROUND, CART, POLE, TRACK};
//!
//! let (h, w) = (20, 48);
//! let mut frame = vec![0u8; h * w];
//! Rasterizer::new(h, w).render(0.6, 0.2, &mut frame);
//! let art: Vec<String> = frame
//!     .chunks(w)
//!     .map(|row| {
//!         row.iter()
//!             .map(|&v| match v {
//!                 BACKGROUND => '.',
//!                 TRACK => '-',
//!                 CART => '#',
//!                 POLE => 'o',
//!                 _ => '?',
//!             })
//!             .collect()
//!     })
//!     .collect();
//! assert_eq!(
//!     art[4..17].join("\n"),
//!     "\
//! ...............................oo...............
//! ...............................oo...............
//! ...............................oo...............
//! ..............................oo................
//! ..............................oo................
//! ..............................oo................
//! ..............................oo................
//! ..............................oo................
//! .............................oo.................
//! .............................oo.................
//! ............................####................
//! ----------------------------####----------------
//! ............................####................"
//! );
//! let background = ".".repeat(w);
//! assert!(art[..4].iter().chain(&art[17..]).all(|row| row == &background));
//! ```
//!
//! Rendering costs well under a CartPole step with a policy: it clears the frame (one
//! `memset`), fills the track row and the cart's rectangle, and tests only the pixels of the
//! pole's bounding box (48 on average over CartPole's states at 64 x 64): about 0.4 µs a
//! 64 x 64 frame, optimized, on a 2-core AMD EPYC (Zen 4).

use super::{ActionRef, CartPole, Env, EnvError, Space, StepResult};

/// Value of the pixels no shape covers.
pub const BACKGROUND: u8 = 0;
/// Value of the track's row.
pub const TRACK: u8 = 80;
/// Value of the pole's pixels.
pub const POLE: u8 = 160;
/// Value of the cart's pixels.
pub const CART: u8 = 255;

/// Width of the world the frame's width shows, m: gymnasium's `x_threshold * 2`.
const WORLD_WIDTH: f64 = CartPole::X_THRESHOLD * 2.0;
/// The cart's width and height, m (gymnasium's 50 and 30 pixels where 600 show 4.8 m).
const CART_WIDTH: f64 = 0.4;
const CART_HEIGHT: f64 = 0.24;
/// The pole's full length, m (gymnasium's `polelen = scale * (2 * length)`).
const POLE_LENGTH: f64 = 2.0 * CartPole::LENGTH;
/// Half the pole's thickness, m (gymnasium's 10 pixels of 600), and at least 1 pixel.
const POLE_HALF_WIDTH: f64 = 0.04;

/// The geometry of one frame size, computed once; [`Rasterizer::render`] draws into frames of
/// that size (see the [module docs](self) for the picture).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rasterizer {
    height: usize,
    width: usize,
    /// Pixels a metre.
    scale: f64,
    /// The track's row; the cart's centre line is its middle.
    track_row: usize,
    cart_half_width: f64,
    cart_half_height: f64,
    pole_length: f64,
    pole_half_width: f64,
}

impl Rasterizer {
    /// The geometry of `height x width` frames.
    ///
    /// # Panics
    /// When either side is 0.
    pub fn new(height: usize, width: usize) -> Self {
        assert!(
            height > 0 && width > 0,
            "PixelCartPole frame of {height} x {width} pixels: both sides must be at least 1"
        );
        let scale = width as f64 / WORLD_WIDTH;
        Self {
            height,
            width,
            scale,
            track_row: (3 * height / 4).min(height - 1),
            cart_half_width: CART_WIDTH * scale / 2.0,
            cart_half_height: CART_HEIGHT * scale / 2.0,
            pole_length: POLE_LENGTH * scale,
            pole_half_width: (POLE_HALF_WIDTH * scale).max(1.0),
        }
    }

    /// `(height, width)` of the frames this draws.
    pub fn shape(&self) -> (usize, usize) {
        (self.height, self.width)
    }

    /// Draws the cart at `x` (m, 0 in the middle of the frame) with the pole at `theta`
    /// (radians from upright, positive leaning towards `+x`) into `frame`, row-major `[H, W]`,
    /// overwriting every pixel.
    ///
    /// # Panics
    /// When `frame.len() != H * W`.
    pub fn render(&self, x: f64, theta: f64, frame: &mut [u8]) {
        let (h, w) = (self.height, self.width);
        assert_eq!(
            frame.len(),
            h * w,
            "PixelCartPole frame buffer of {} bytes, expected {h} x {w}",
            frame.len()
        );
        frame.fill(BACKGROUND);
        frame[self.track_row * w..(self.track_row + 1) * w].fill(TRACK);
        if !(x.is_finite() && theta.is_finite()) {
            return;
        }
        let cx = w as f64 / 2.0 + x * self.scale;
        let cy = self.track_row as f64 + 0.5;
        let top = cy - self.cart_half_height;
        // The pole: pixels whose centres lie within pole_half_width of the segment a-b.
        let (ax, ay) = (cx, top);
        let (dx, dy) = (
            self.pole_length * theta.sin(),
            -self.pole_length * theta.cos(),
        );
        let r = self.pole_half_width;
        let cols = covered(ax.min(ax + dx) - r, ax.max(ax + dx) + r, w);
        let rows = covered(ay.min(ay + dy) - r, ay.max(ay + dy) + r, h);
        let inv_length2 = 1.0 / (dx * dx + dy * dy);
        for row in rows {
            let py = row as f64 + 0.5 - ay;
            let line = &mut frame[row * w..(row + 1) * w];
            for col in cols.clone() {
                let px = col as f64 + 0.5 - ax;
                // The nearest point of the segment: a + t (b - a), t clamped to [0, 1].
                let t = ((px * dx + py * dy) * inv_length2).clamp(0.0, 1.0);
                let (ex, ey) = (px - t * dx, py - t * dy);
                if ex * ex + ey * ey <= r * r {
                    line[col] = POLE;
                }
            }
        }
        // The cart, over the pole's foot.
        let cols = covered(cx - self.cart_half_width, cx + self.cart_half_width, w);
        for row in covered(top, cy + self.cart_half_height, h) {
            frame[row * w..(row + 1) * w][cols.clone()].fill(CART);
        }
    }
}

/// The pixels `0..n` whose centres `i + 0.5` lie in `[lo, hi]` (empty when none do).
fn covered(lo: f64, hi: f64, n: usize) -> std::ops::Range<usize> {
    // Centre i + 0.5 >= lo  <=>  i >= lo - 0.5; clamped before the cast (which saturates).
    let first = (lo - 0.5).ceil().clamp(0.0, n as f64) as usize;
    let end = ((hi - 0.5).floor() + 1.0).clamp(0.0, n as f64) as usize;
    first..end.max(first)
}

/// CartPole-v1 observed as a `64 x 64` grayscale frame ([`Rasterizer`]): the same dynamics,
/// rewards and termination as [`CartPole`] (its reset distribution and seeding too), with the
/// float state hidden. No time limit of its own (as [`CartPole`]): [`super::make`] wraps it in
/// CartPole-v1's 500 steps as `PixelCartPole-v1`.
///
/// Its observation is an image alone ([`Space::Image`] `[64, 64, 1]`): the values lane is
/// empty, and [`Env::pixels`] copies the frame rendered at the last reset or step, `[H, W]`
/// row-major ([`Self::frame`]), every value one of [`BACKGROUND`], [`TRACK`], [`POLE`],
/// [`CART`].
///
/// ```
/// use common::envs::pixel_cartpole::PixelCartPole;
/// use common::envs::{ActionRef, Env};
///
/// let mut env = PixelCartPole::new();
/// env.reset(7, &mut []);
/// let mut frame = vec![0u8; env.observation_space().pixels()];
/// env.pixels(&mut frame);
/// assert_eq!((frame.len(), env.frame()), (64 * 64, &frame[..]));
/// let mut steps = 1;
/// while !env.step(ActionRef::Discrete(1), &mut []).terminated {
///     steps += 1;
/// }
/// assert!(steps < 100 && env.frame() != &frame[..]);
/// ```
#[derive(Clone, Debug)]
pub struct PixelCartPole {
    cartpole: CartPole,
    rasterizer: Rasterizer,
    frame: Vec<u8>,
}

impl Default for PixelCartPole {
    fn default() -> Self {
        Self::new()
    }
}

impl PixelCartPole {
    /// The id it is meant to be registered under.
    pub const ID: &'static str = "PixelCartPole-v1";
    /// Frame height and width, pixels.
    pub const HEIGHT: usize = 64;
    pub const WIDTH: usize = 64;

    /// A cart at rest with the pole upright, already rendered; [`Self::reset`] starts a random
    /// episode.
    pub fn new() -> Self {
        let rasterizer = Rasterizer::new(Self::HEIGHT, Self::WIDTH);
        let mut env = Self {
            cartpole: CartPole::new(),
            rasterizer,
            frame: vec![BACKGROUND; Self::HEIGHT * Self::WIDTH],
        };
        env.render();
        env
    }

    /// The current frame: `[H, W]` row-major.
    pub fn frame(&self) -> &[u8] {
        &self.frame
    }

    fn render(&mut self) {
        let [x, _, theta, _] = self.cartpole.state();
        self.rasterizer.render(x, theta, &mut self.frame);
    }
}

impl Env for PixelCartPole {
    fn id(&self) -> &str {
        Self::ID
    }

    /// `[64, 64, 1]` grayscale pixels, nothing in the values lane.
    fn observation_space(&self) -> Space {
        Space::Image {
            shape: [Self::HEIGHT, Self::WIDTH, 1],
        }
    }

    /// CartPole's `Discrete(2)`: 0 pushes left, 1 right.
    fn action_space(&self) -> Space {
        self.cartpole.action_space()
    }

    /// Starts an episode as [`CartPole`]'s `reset(seed)` does, and renders its first frame.
    fn reset(&mut self, seed: u64, _values: &mut [f32]) {
        let mut state = [0.0f32; 4];
        self.cartpole.reset(seed, &mut state);
        self.render();
    }

    /// One CartPole step, then renders the frame after it.
    fn step(&mut self, action: ActionRef<'_>, _values: &mut [f32]) -> StepResult {
        let r = self.cartpole.advance(Self::ID, action);
        self.render();
        r
    }

    fn pixels(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.frame);
    }

    /// The CartPole state mid-episode (the frame is rendered again from it on load).
    fn save_state(&self) -> Option<Vec<u8>> {
        self.cartpole.save_state()
    }

    /// Restores what [`Env::save_state`] wrote and renders its frame.
    fn load_state(&mut self, state: &[u8]) -> Result<(), EnvError> {
        self.cartpole.load_state(state).map_err(|e| match e {
            EnvError::State { reason, .. } => EnvError::State {
                id: Self::ID.into(),
                reason,
            },
            other => other,
        })?;
        self.render();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: usize = 64;
    const W: usize = 64;

    fn frame(x: f64, theta: f64) -> Vec<u8> {
        let mut f = vec![7u8; H * W];
        Rasterizer::new(H, W).render(x, theta, &mut f);
        f
    }

    /// `(row, col)` of every pixel of value `v`.
    fn pixels(f: &[u8], v: u8) -> Vec<(usize, usize)> {
        (0..H * W)
            .filter(|&i| f[i] == v)
            .map(|i| (i / W, i % W))
            .collect()
    }

    fn columns(px: &[(usize, usize)]) -> (usize, usize) {
        let cols = px.iter().map(|p| p.1);
        (cols.clone().min().unwrap(), cols.max().unwrap())
    }

    #[test]
    fn every_pixel_is_one_of_the_four_values_and_the_track_spans_the_frame() {
        for (x, theta) in [(0.0, 0.0), (1.3, -0.15), (-2.4, 0.21), (2.45, -0.3)] {
            let f = frame(x, theta);
            assert!(f
                .iter()
                .all(|v| [BACKGROUND, TRACK, POLE, CART].contains(v)));
            let track_row = 3 * H / 4;
            for (c, &v) in f[track_row * W..(track_row + 1) * W].iter().enumerate() {
                assert!(
                    v == TRACK || v == CART,
                    "x {x}: column {c} of the track is {v}"
                );
            }
            assert!(!pixels(&f, CART).is_empty() && !pixels(&f, POLE).is_empty());
        }
    }

    #[test]
    fn the_cart_is_centred_on_x_and_moves_with_it() {
        let scale = W as f64 / 4.8;
        let centred = pixels(&frame(0.0, 0.0), CART);
        // 0.4 m = 5.33 pixels wide around column 32.0: columns 29..=34; 3 rows on the track.
        assert_eq!(columns(&centred), (29, 34));
        let rows: Vec<usize> = centred.iter().map(|p| p.0).collect();
        assert_eq!(
            (*rows.iter().min().unwrap(), *rows.iter().max().unwrap()),
            (47, 49)
        );
        assert_eq!(centred.len(), 6 * 3);
        for x in [-1.5, -0.3, 0.075, 0.9, 2.0] {
            let (lo, hi) = columns(&pixels(&frame(x, 0.0), CART));
            let mid = (lo + hi + 1) as f64 / 2.0;
            let want = 32.0 + x * scale;
            assert!(
                (mid - want).abs() <= 0.5,
                "x {x}: cart middle {mid}, want {want}"
            );
            assert!(
                (5..=6).contains(&(hi + 1 - lo)),
                "x {x}: {} columns",
                hi + 1 - lo
            );
        }
        // One pixel per 0.075 m: a cart 0.3 m to the right sits 4 columns to the right.
        let (lo, _) = columns(&pixels(&frame(0.3, 0.0), CART));
        assert_eq!(lo, 33);
    }

    /// The topmost pole row, and the mean column of the pole's pixels in it.
    fn pole_top(theta: f64) -> (usize, f64) {
        let pole = pixels(&frame(0.0, theta), POLE);
        let top = pole.iter().map(|p| p.0).min().unwrap();
        let cols: Vec<f64> = pole
            .iter()
            .filter(|p| p.0 == top)
            .map(|p| p.1 as f64 + 0.5)
            .collect();
        (top, cols.iter().sum::<f64>() / cols.len() as f64)
    }

    #[test]
    fn the_pole_stands_at_theta_from_the_cart_top() {
        let scale = W as f64 / 4.8;
        let (pivot_x, pivot_y) = (32.0, 48.5 - 0.12 * scale);
        // Upright: 13.33 pixels above the cart's top edge (46.9) ends at 33.57, so the top
        // row is 33, columns 31 and 32 around the centre line.
        assert_eq!(pole_top(0.0), (33, 32.0));
        let upright = pixels(&frame(0.0, 0.0), POLE);
        assert!(
            upright.iter().all(|p| (31..=32).contains(&p.1)),
            "{upright:?}"
        );
        assert_eq!(upright.len(), 2 * (46 - 33 + 1));
        for theta in [0.2f64, -0.2] {
            let tip_x = pivot_x + scale * theta.sin();
            let tip_y = pivot_y - scale * theta.cos();
            let (row, col) = pole_top(theta);
            assert!(
                (row as f64 + 0.5 - tip_y).abs() <= 1.0,
                "theta {theta}: top row {row}, tip at y {tip_y}"
            );
            assert!(
                (col - tip_x).abs() <= 1.0,
                "theta {theta}: top at column {col}, tip at x {tip_x}"
            );
            // The pole's pixels lie along theta: their centroid's direction from the pivot.
            let pole = pixels(&frame(0.0, theta), POLE);
            let n = pole.len() as f64;
            let mx = pole.iter().map(|p| p.1 as f64 + 0.5).sum::<f64>() / n;
            let my = pole.iter().map(|p| p.0 as f64 + 0.5).sum::<f64>() / n;
            let angle = (mx - pivot_x).atan2(pivot_y - my);
            assert!(
                (angle - theta).abs() < 0.05,
                "theta {theta}: pixels lie at {angle}"
            );
        }
        // Mirror images.
        let (left, right) = (frame(0.0, -0.2), frame(0.0, 0.2));
        for r in 0..H {
            for c in 0..W {
                let mirrored = right[r * W + (W - 1 - c)];
                assert_eq!(left[r * W + c], mirrored, "pixel ({r}, {c})");
            }
        }
    }

    #[test]
    fn parts_outside_the_frame_are_clipped() {
        for x in [-2.4, 2.4] {
            let f = frame(x, 0.0);
            // Half the cart: 3 columns at the edge it went out of.
            let cart = pixels(&f, CART);
            let (lo, hi) = columns(&cart);
            assert_eq!(hi - lo + 1, 3, "x {x}: {cart:?}");
            assert!(lo == 0 || hi == W - 1, "x {x}: cart at {lo}..={hi}");
            // The pole stands on the edge: one column of it left inside.
            let pole = pixels(&f, POLE);
            assert_eq!(pole.len(), 14, "x {x}: {pole:?}");
        }
        // Beyond the frame, falling, or not a number: the track alone, nothing out of bounds.
        for (x, theta) in [
            (-3.0, 0.0),
            (40.0, -1.0),
            (1e300, 0.0),
            (f64::NAN, 0.0),
            (0.0, f64::INFINITY),
        ] {
            let f = frame(x, theta);
            assert_eq!(pixels(&f, CART), vec![], "x {x} theta {theta}");
            assert_eq!(pixels(&f, POLE), vec![], "x {x} theta {theta}");
            assert_eq!(pixels(&f, TRACK).len(), W);
        }
        // A pole fallen flat past the frame's edge, the cart just inside.
        let f = frame(2.3, std::f64::consts::FRAC_PI_2);
        assert!(pixels(&f, POLE).iter().all(|p| p.1 < W));
        // Frames of any size, down to one pixel.
        for (h, w) in [(1, 1), (2, 3), (5, 1), (84, 84), (40, 120)] {
            let mut f = vec![9u8; h * w];
            Rasterizer::new(h, w).render(0.1, 0.1, &mut f);
            assert!(f.iter().all(|&v| v != 9), "{h} x {w}");
        }
    }

    #[test]
    #[should_panic(expected = "frame buffer of 100 bytes, expected 64 x 64")]
    fn a_buffer_of_the_wrong_size_is_refused() {
        Rasterizer::new(H, W).render(0.0, 0.0, &mut [0u8; 100]);
    }

    #[test]
    fn the_env_runs_cartpoles_episodes_and_renders_each_state() {
        let mut env = PixelCartPole::new();
        let mut cartpole = CartPole::new();
        let mut state = [0.0f32; 4];
        env.reset(3, &mut []);
        cartpole.reset(3, &mut state);
        let rasterizer = Rasterizer::new(H, W);
        let mut expected = vec![0u8; H * W];
        let mut steps = 0;
        loop {
            let [x, _, theta, _] = cartpole.state();
            rasterizer.render(x, theta, &mut expected);
            assert_eq!(env.frame(), &expected[..], "step {steps}");
            let action = ActionRef::Discrete((steps / 7 % 2) as i64);
            let (a, b) = (env.step(action, &mut []), cartpole.step(action, &mut state));
            assert_eq!(a, b, "step {steps}");
            steps += 1;
            if a.terminated {
                break;
            }
        }
        assert!(steps > 10, "{steps} steps");
        // A saved state resumes the same frame and the same episode.
        env.reset(11, &mut []);
        env.step(ActionRef::Discrete(1), &mut []);
        let saved = env.save_state().unwrap();
        let mut resumed = PixelCartPole::new();
        resumed.load_state(&saved).unwrap();
        assert_eq!(resumed.frame(), env.frame());
        for t in 0..5 {
            let action = ActionRef::Discrete(t % 2);
            assert_eq!(resumed.step(action, &mut []), env.step(action, &mut []));
            assert_eq!(resumed.frame(), env.frame(), "step {t}");
        }
        let err = resumed.load_state(&saved[1..]).unwrap_err().to_string();
        assert!(err.contains(PixelCartPole::ID), "{err}");
    }

    /// Mean time of one 64 x 64 render over states CartPole visits; the bound is for optimized
    /// builds (`cargo test --release`), 10x for debug ones.
    #[test]
    fn rendering_a_frame_is_fast() {
        let rasterizer = Rasterizer::new(H, W);
        let mut f = vec![0u8; H * W];
        let n = 20_000;
        let start = std::time::Instant::now();
        for i in 0..n {
            let k = i as f64 / n as f64;
            rasterizer.render(4.8 * k - 2.4, 0.42 * k - 0.21, std::hint::black_box(&mut f));
        }
        let each = start.elapsed().as_secs_f64() / n as f64;
        let bound = if cfg!(debug_assertions) { 20e-6 } else { 2e-6 };
        eprintln!("PixelCartPole render {H}x{W}: {:.0} ns", each * 1e9);
        assert!(each < bound, "{:.0} ns a frame", each * 1e9);
    }
}

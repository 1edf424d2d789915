//! The gymnasium bridge's shared arrays: one segment per actor holding the actions the actor
//! writes and the observations, rewards and flags its Python worker writes, for all `E`
//! environments of one vector step (`numpy` views on the Python side, no pickling).
//!
//! Access is turn-based per group of rows, not concurrent: the actor writes the actions of
//! environments `lo..hi`, sends a step command for them on the worker's stdin, and touches
//! those rows again only after the worker's answer byte on its stdout
//! (`common::envs::gymnasium`). Meanwhile it may write and read the rows of other environments
//! (another pipeline group), which the worker is not touching. The pipe's write/read pair
//! orders the two sides' memory accesses (the kernel synchronises them); the fences below make
//! the intent explicit.

use std::sync::atomic::{fence, Ordering};

use serde::Serialize;

use super::segment::{Segment, ShmError, HEADER_LEN, SHM_DIR};

/// Byte offsets of the arrays inside the segment's body, each 64-byte aligned. Sent to the
/// worker as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BridgeLayout {
    pub envs: usize,
    pub obs_dim: usize,
    /// Bytes of one observation's pixels lane (`Space::pixels`; 0 without images).
    pub pixels: usize,
    /// Values per action (1 for Discrete, the box's length, the number of MultiDiscrete
    /// components).
    pub action_dim: usize,
    /// `[E, action_dim]` i64: discrete and multi-discrete actions (0-based).
    pub actions_i64: usize,
    /// `[E, action_dim]` f32: box actions.
    pub actions_f32: usize,
    /// `[E, obs_dim]` f32: what the policy sees next (the reset observation after a done).
    pub obs: usize,
    /// `[E, obs_dim]` f32: the observation the step produced (the true final one at a done).
    pub next_obs: usize,
    /// `[E, pixels]` u8: `obs`'s pixels lane.
    pub obs_pixels: usize,
    /// `[E, pixels]` u8: `next_obs`'s pixels lane.
    pub next_obs_pixels: usize,
    /// `[E]` f64.
    pub reward: usize,
    /// `[E]` u8.
    pub terminated: usize,
    /// `[E]` u8.
    pub truncated: usize,
    /// Body bytes.
    pub total: usize,
    /// Where the body starts in the file (the segment header's length).
    pub body_offset: usize,
}

impl BridgeLayout {
    /// The layout for `envs` environments of `obs_dim` observation values, `pixels` bytes of
    /// pixels and `action_dim` action values.
    pub fn new(envs: usize, obs_dim: usize, pixels: usize, action_dim: usize) -> Self {
        let mut at = 0usize;
        let mut take = |bytes: usize| {
            let start = at;
            at = (at + bytes).div_ceil(64) * 64;
            start
        };
        let actions_i64 = take(envs * action_dim * 8);
        let actions_f32 = take(envs * action_dim * 4);
        let obs = take(envs * obs_dim * 4);
        let next_obs = take(envs * obs_dim * 4);
        let obs_pixels = take(envs * pixels);
        let next_obs_pixels = take(envs * pixels);
        let reward = take(envs * 8);
        let terminated = take(envs);
        let truncated = take(envs);
        BridgeLayout {
            envs,
            obs_dim,
            pixels,
            action_dim,
            actions_i64,
            actions_f32,
            obs,
            next_obs,
            obs_pixels,
            next_obs_pixels,
            reward,
            terminated,
            truncated,
            total: at.max(64),
            body_offset: HEADER_LEN,
        }
    }
}

/// The arrays of one actor's bridge, in a segment this process owns (unlinked on drop).
pub struct BridgeArrays {
    segment: Segment,
    layout: BridgeLayout,
}

impl BridgeArrays {
    /// Creates segment `name` (starting with `recur-`) sized for `layout`.
    ///
    /// # Errors
    /// Whatever [`Segment::create`] reports, naming the segment.
    pub fn create(name: &str, layout: BridgeLayout) -> Result<Self, ShmError> {
        let segment = Segment::create(name, layout.total)?;
        Ok(BridgeArrays { segment, layout })
    }

    pub fn layout(&self) -> &BridgeLayout {
        &self.layout
    }

    /// The file the worker maps (`/dev/shm/<name>`).
    pub fn path(&self) -> String {
        format!("{SHM_DIR}/{}", self.segment.name())
    }

    /// Copies `src` to body offset `offset`.
    fn write<T: Copy>(&mut self, offset: usize, src: &[T]) {
        let bytes = std::mem::size_of_val(src);
        assert!(
            offset + bytes <= self.layout.total && offset.is_multiple_of(std::mem::align_of::<T>()),
            "internal: bridge write of {bytes} bytes at {offset} outside the layout"
        );
        // SAFETY: the range lies inside the body (checked above; the body holds
        // `layout.total` bytes) and is aligned for T (the body is page-aligned plus 64, the
        // arrays start at multiples of 64 and `offset` is a multiple of T's alignment, checked
        // above). The worker does not touch these rows while the actor holds their turn (no
        // step command for them is outstanding: `GymVecEnv` tracks them), so nothing accesses
        // them concurrently. `src` is a Rust slice, never inside the mapping, so the ranges do
        // not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr() as *const u8,
                self.segment.body_ptr().add(offset),
                bytes,
            );
        }
    }

    /// Copies from body offset `offset` into `dst`.
    fn read<T: Copy>(&self, offset: usize, dst: &mut [T]) {
        let bytes = std::mem::size_of_val(dst);
        assert!(
            offset + bytes <= self.layout.total && offset.is_multiple_of(std::mem::align_of::<T>()),
            "internal: bridge read of {bytes} bytes at {offset} outside the layout"
        );
        // SAFETY: in bounds and aligned as in `write`. T is one of f32, f64, i64, u8, for which
        // every bit pattern is a valid value, so whatever the worker wrote is readable. The
        // worker has answered the last command for these rows and writes them only after the
        // next one.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.segment.body_ptr().add(offset) as *const u8,
                dst.as_mut_ptr() as *mut u8,
                bytes,
            );
        }
    }

    /// Writes discrete / multi-discrete actions from value `at` on (`at = lo * action_dim`
    /// for environments `lo..`; `actions.len()` a multiple of `action_dim`).
    pub fn write_actions_i64(&mut self, at: usize, actions: &[i64]) {
        self.check_rows(at, actions.len(), self.layout.action_dim);
        self.write(self.layout.actions_i64 + at * 8, actions);
        // Release: the actions are written before the command byte that hands over the turn.
        fence(Ordering::Release);
    }

    /// Writes box actions from value `at` on, as [`BridgeArrays::write_actions_i64`].
    pub fn write_actions_f32(&mut self, at: usize, actions: &[f32]) {
        self.check_rows(at, actions.len(), self.layout.action_dim);
        self.write(self.layout.actions_f32 + at * 4, actions);
        fence(Ordering::Release);
    }

    /// Reads what the worker wrote for the last step command of environments `lo..lo + n`
    /// (`n = reward.len()`): `obs`, `next_obs` (`[n * D]`), their pixels (`[n * P]`), rewards
    /// and flags (`[n]`).
    #[allow(clippy::too_many_arguments)]
    pub fn read_step(
        &self,
        lo: usize,
        (obs, next_obs): (&mut [f32], &mut [f32]),
        (pixels, next_pixels): (&mut [u8], &mut [u8]),
        reward: &mut [f64],
        terminated: &mut [u8],
        truncated: &mut [u8],
    ) {
        let (n, d, p) = (reward.len(), self.layout.obs_dim, self.layout.pixels);
        assert!(
            lo + n <= self.layout.envs
                && obs.len() == n * d
                && next_obs.len() == n * d
                && pixels.len() == n * p
                && next_pixels.len() == n * p
                && terminated.len() == n
                && truncated.len() == n,
            "internal: bridge read of envs {lo}..{} of {}",
            lo + n,
            self.layout.envs
        );
        // Acquire: read after the answer byte that handed the turn back.
        fence(Ordering::Acquire);
        self.read(self.layout.obs + lo * d * 4, obs);
        self.read(self.layout.next_obs + lo * d * 4, next_obs);
        self.read(self.layout.obs_pixels + lo * p, pixels);
        self.read(self.layout.next_obs_pixels + lo * p, next_pixels);
        self.read(self.layout.reward + lo * 8, reward);
        self.read(self.layout.terminated + lo, terminated);
        self.read(self.layout.truncated + lo, truncated);
    }

    /// `len` values from value `at` are whole rows of `per_env` values inside the arrays.
    fn check_rows(&self, at: usize, len: usize, per_env: usize) {
        assert!(
            at.is_multiple_of(per_env)
                && len.is_multiple_of(per_env)
                && at + len <= self.layout.envs * per_env,
            "internal: bridge rows {at}..{} of {} x {per_env}",
            at + len,
            self.layout.envs
        );
    }

    /// Reads the observations `[E * D]` and their pixels `[E * P]` after a reset.
    pub fn read_obs(&self, obs: &mut [f32], pixels: &mut [u8]) {
        fence(Ordering::Acquire);
        self.read(self.layout.obs, obs);
        self.read(self.layout.obs_pixels, pixels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::unique_run_id;

    #[test]
    fn layout_is_aligned_and_disjoint() {
        let l = BridgeLayout::new(3, 5, 7, 2);
        let offsets = [
            l.actions_i64,
            l.actions_f32,
            l.obs,
            l.next_obs,
            l.obs_pixels,
            l.next_obs_pixels,
            l.reward,
            l.terminated,
            l.truncated,
        ];
        assert!(offsets.iter().all(|o| o % 64 == 0));
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        assert!(l.truncated + 3 <= l.total);
    }

    #[test]
    fn arrays_round_trip_through_the_file() {
        let name = format!("recur-{}-bridge-test", unique_run_id());
        let mut a = BridgeArrays::create(&name, BridgeLayout::new(2, 3, 2, 1)).unwrap();
        a.write_actions_i64(0, &[4, -1]);
        a.write_actions_i64(1, &[9]);
        // The file another process maps holds the bytes at body_offset + offset.
        let bytes = std::fs::read(a.path()).unwrap();
        let at = a.layout().body_offset + a.layout().actions_i64;
        assert_eq!(&bytes[at..at + 8], &4i64.to_le_bytes());
        assert_eq!(&bytes[at + 8..at + 16], &9i64.to_le_bytes());
        let (mut obs, mut pixels) = (vec![1.0f32; 6], vec![1u8; 4]);
        a.read_obs(&mut obs, &mut pixels);
        assert_eq!((obs, pixels), (vec![0.0; 6], vec![0; 4]));
    }
}

//! Generalised advantage estimation over chunk rows (`[E, T]`, one env's steps per row).
//!
//! ```text
//! delta_t = r_t + gamma * (1 - terminated_t) * V'_t - V_t
//! A_t     = delta_t + gamma * lambda * continues_t * A_{t+1}
//! ```
//! `V'_t` is the value of the *next* observation under the post-step recurrent state: the value
//! of step `t + 1` when the trajectory continues inside the row, otherwise (a truncation, or
//! the row's last step) the critic's value of `next.observation` — computed by the caller's
//! recurrent critic. `continues_t` is false at `done` (terminated or truncated), at the row's
//! last step, and wherever the trajectory id changes, so the recursion never crosses an
//! episode or a trajectory. A truncated step still bootstraps from `V'_t`; a terminated one
//! does not.

/// Advantages and value targets (`A + V`) of every step.
#[derive(Clone, Debug, PartialEq)]
pub struct Advantages {
    pub advantage: Vec<f32>,
    pub value_target: Vec<f32>,
}

/// The inputs of one batch of rows, each `[rows * steps]` row-major.
pub struct GaeInput<'a> {
    pub steps: usize,
    pub reward: &'a [f32],
    pub value: &'a [f32],
    /// `V'_t` where it is not `value[t + 1]` (truncations, row ends); read only there.
    pub next_value: &'a [f32],
    pub terminated: &'a [bool],
    pub done: &'a [bool],
    pub traj_ids: &'a [i64],
    pub gamma: f32,
    pub lambda: f32,
}

/// Where `V'_t` is not the next step's value: `done` steps and each row's last step.
pub fn needs_bootstrap(t: usize, steps: usize, done: bool, same_traj_next: bool) -> bool {
    done || t + 1 == steps || !same_traj_next
}

/// Computes advantages and value targets.
pub fn gae(input: &GaeInput<'_>) -> Advantages {
    let n = input.reward.len();
    let t_len = input.steps;
    let mut advantage = vec![0.0f32; n];
    for row in 0..n / t_len {
        let mut next_adv = 0.0f32;
        for t in (0..t_len).rev() {
            let p = row * t_len + t;
            let same_next = t + 1 < t_len && input.traj_ids[p + 1] == input.traj_ids[p];
            let bootstrap = needs_bootstrap(t, t_len, input.done[p], same_next);
            let v_next = if bootstrap {
                input.next_value[p]
            } else {
                input.value[p + 1]
            };
            let not_terminal = if input.terminated[p] { 0.0 } else { 1.0 };
            let delta = input.reward[p] + input.gamma * not_terminal * v_next - input.value[p];
            let continues = if bootstrap { 0.0 } else { 1.0 };
            next_adv = delta + input.gamma * input.lambda * continues * next_adv;
            advantage[p] = next_adv;
        }
    }
    let value_target = advantage
        .iter()
        .zip(input.value)
        .map(|(a, v)| a + v)
        .collect();
    Advantages {
        advantage,
        value_target,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: &[f32], want: &[f64]) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((*g as f64 - w).abs() < 1e-5, "[{i}] {g} vs {w}");
        }
    }

    /// One row of 4 steps, no episode end: the last step bootstraps from next_value.
    #[test]
    fn a_continuing_row_bootstraps_at_its_end() {
        let (g, l) = (0.9f64, 0.8f64);
        let r = [1.0, 0.0, 2.0, 1.0];
        let v = [0.5, 0.4, 0.3, 0.2];
        let nv_end = 0.7;
        let out = gae(&GaeInput {
            steps: 4,
            reward: &r,
            value: &v,
            next_value: &[0.0, 0.0, 0.0, nv_end],
            terminated: &[false; 4],
            done: &[false; 4],
            traj_ids: &[7; 4],
            gamma: g as f32,
            lambda: l as f32,
        });
        let (r, v): (Vec<f64>, Vec<f64>) = (
            r.iter().map(|&x| x as f64).collect(),
            v.iter().map(|&x| x as f64).collect(),
        );
        let d3 = r[3] + g * nv_end as f64 - v[3];
        let d2 = r[2] + g * v[3] - v[2];
        let d1 = r[1] + g * v[2] - v[1];
        let d0 = r[0] + g * v[1] - v[0];
        let a3 = d3;
        let a2 = d2 + g * l * a3;
        let a1 = d1 + g * l * a2;
        let a0 = d0 + g * l * a1;
        close(&out.advantage, &[a0, a1, a2, a3]);
        close(
            &out.value_target,
            &[a0 + v[0], a1 + v[1], a2 + v[2], a3 + v[3]],
        );
    }

    /// A truncation mid-row bootstraps from the truncated step's next value and cuts the
    /// recursion; a termination does neither bootstrap nor continue.
    #[test]
    fn truncation_bootstraps_termination_does_not() {
        let (g, l) = (0.5f32, 1.0f32);
        // Steps: 0 1 [2 truncated] | 3 [4 terminated] | 5 (row end)
        let r = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let v = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let nv = [9.0, 9.0, 4.0, 9.0, 100.0, 2.0]; // read at 2 (truncated), 4 (ignored: terminated), 5 (row end)
        let out = gae(&GaeInput {
            steps: 6,
            reward: &r,
            value: &v,
            next_value: &nv,
            terminated: &[false, false, false, false, true, false],
            done: &[false, false, true, false, true, false],
            traj_ids: &[1, 1, 1, 2, 2, 3],
            gamma: g,
            lambda: l,
        });
        // t=5: 1 + 0.5*2 = 2.  t=4: terminated: 1.  t=3: 1 + 0.5*0 + 0.5*1 = 1.5.
        // t=2: 1 + 0.5*4 = 3 (cut).  t=1: 1 + 0.5*3 = 2.5.  t=0: 1 + 0.5*2.5 = 2.25.
        close(&out.advantage, &[2.25, 2.5, 3.0, 1.5, 1.0, 2.0]);
    }

    /// A trajectory that spans two chunks: the first chunk's last step bootstraps from the
    /// value of the second chunk's first step; with the true values, every advantage is zero
    /// and every value target is the true value, in both chunks.
    #[test]
    fn a_trajectory_spanning_two_chunks_bootstraps_across_the_boundary() {
        let g = 0.9f32;
        // True values of a 6-step episode with reward 1 per step, terminated at the end.
        let vals: Vec<f32> = (0..6)
            .map(|t| (0..6 - t).map(|k| g.powi(k)).sum())
            .collect();
        let first = gae(&GaeInput {
            steps: 3,
            reward: &[1.0; 3],
            value: &vals[0..3],
            next_value: &[0.0, 0.0, vals[3]],
            terminated: &[false; 3],
            done: &[false; 3],
            traj_ids: &[5; 3],
            gamma: g,
            lambda: 0.95,
        });
        let second = gae(&GaeInput {
            steps: 3,
            reward: &[1.0; 3],
            value: &vals[3..6],
            next_value: &[0.0, 0.0, 0.0],
            terminated: &[false, false, true],
            done: &[false, false, true],
            traj_ids: &[5; 3],
            gamma: g,
            lambda: 0.95,
        });
        // Exact values give zero advantages everywhere, and targets equal to the values.
        for a in first.advantage.iter().chain(&second.advantage) {
            assert!(a.abs() < 1e-5, "advantage {a} with exact values");
        }
        close(
            &first.value_target,
            &vals[0..3].iter().map(|&x| x as f64).collect::<Vec<_>>(),
        );
        close(
            &second.value_target,
            &vals[3..6].iter().map(|&x| x as f64).collect::<Vec<_>>(),
        );
    }

    /// Two rows are independent, and a traj id change inside a row cuts the recursion even
    /// without a done flag.
    #[test]
    fn rows_and_trajectory_ids_are_never_crossed() {
        let out = gae(&GaeInput {
            steps: 2,
            reward: &[1.0, 1.0, 1.0, 1.0],
            value: &[0.0; 4],
            next_value: &[3.0, 5.0, 3.0, 5.0],
            terminated: &[false; 4],
            done: &[false; 4],
            traj_ids: &[1, 2, 3, 3],
            gamma: 1.0,
            lambda: 1.0,
        });
        // Row 0: traj changes after step 0 -> both steps bootstrap from their next_value.
        // Row 1: step 0 continues into step 1 (value 0): 1 + 0 + (1 + 5) = 7.
        close(&out.advantage, &[4.0, 6.0, 7.0, 6.0]);
    }
}

//! The observation normalizer's running statistics.

/// Rows of [`super::Policy::obs_norm`]: running mean, running variance, sample count (every column
/// the same) and clip bound of each observation feature.
pub const OBS_NORM_ROWS: usize = 4;

/// Running observation statistics (Chan et al.'s parallel mean/variance merge), what the
/// learner folds the observations it trains on into.
#[derive(Clone, Debug, PartialEq)]
pub struct ObsStats {
    pub mean: Vec<f32>,
    pub var: Vec<f32>,
    pub count: f64,
}

impl ObsStats {
    /// Merges a batch of observations (`[N, dim]`, row-major) into the statistics.
    pub fn merge(&mut self, obs: &[f32]) {
        let dim = self.mean.len();
        let n = (obs.len() / dim) as f64;
        if n == 0.0 {
            return;
        }
        let (mut mean, mut var) = (vec![0.0; dim], vec![0.0; dim]);
        for j in 0..dim {
            let column = obs.iter().skip(j).step_by(dim).map(|&x| x as f64);
            mean[j] = column.clone().sum::<f64>() / n;
            var[j] = column.map(|x| (x - mean[j]).powi(2)).sum::<f64>() / n;
        }
        self.merge_moments(n, &mean, &var);
    }

    /// Merges a batch of `n` observations given by its per-feature mean and (population)
    /// variance.
    pub fn merge_moments(&mut self, n: f64, mean_b: &[f64], var_b: &[f64]) {
        if n == 0.0 {
            return;
        }
        for j in 0..self.mean.len() {
            let (mean_a, var_a) = (self.mean[j] as f64, self.var[j] as f64);
            let total = self.count + n;
            let delta = mean_b[j] - mean_a;
            let mean = mean_a + delta * n / total;
            let m2 = var_a * self.count + var_b[j] * n + delta * delta * self.count * n / total;
            self.mean[j] = mean as f32;
            self.var[j] = (m2 / total) as f32;
        }
        self.count += n;
    }
}

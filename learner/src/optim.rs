//! The trained model with its Adam optimizer: one gradient step with global-norm clipping,
//! and the checkpoint bytes of both. Shared by PPO, DQN and behaviour cloning.

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param, ParamId};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamConfig, GradientsParams, Optimizer};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use common::backend::{cpu_device, to_vec as host, Cpu, CpuAutodiff};
use common::policy::{Policy, PolicyConfig};

pub type Model = Policy<CpuAutodiff>;
type Optim = OptimizerAdaptor<Adam, Model, CpuAutodiff>;

/// A policy (or Q-network) under training.
pub struct Trainee {
    pub model: Model,
    optim: Optim,
}

impl Trainee {
    /// A freshly initialised model (weights from `seed` alone).
    pub fn new(policy: &PolicyConfig, seed: u64) -> anyhow::Result<Self> {
        Ok(Trainee {
            model: policy.init_seeded(seed, &cpu_device())?,
            optim: AdamConfig::new().with_epsilon(1e-5).init(),
        })
    }

    /// The model without autodiff (inference copy).
    pub fn inference(&self) -> Policy<Cpu> {
        self.model.valid()
    }

    /// Backpropagates `loss`, clips the gradients' global norm to `max_norm` and takes one
    /// Adam step with learning rate `lr`; returns the norm before clipping.
    pub fn step(&mut self, loss: Tensor<CpuAutodiff, 1>, lr: f64, max_norm: f32) -> f32 {
        let grads = loss.backward();
        let mut grads = GradientsParams::from_grads(grads, &self.model);
        let grad_norm = clip_global_norm(&self.model, &mut grads, max_norm);
        let model = self.model.clone();
        self.model = self.optim.step(lr, model, grads);
        grad_norm
    }

    /// The model record and the optimizer state, as bytes (checkpoints).
    pub fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let model =
            Recorder::<CpuAutodiff>::record(&recorder, self.model.clone().into_record(), ())?;
        let optim = Recorder::<CpuAutodiff>::record(&recorder, self.optim.to_record(), ())?;
        Ok((model, optim))
    }

    /// Restores what [`save_state`](Self::save_state) wrote.
    pub fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let device = cpu_device();
        let record = Recorder::<CpuAutodiff>::load(&recorder, model, &device)?;
        self.model = self.model.clone().load_record(record);
        let record = Recorder::<CpuAutodiff>::load(&recorder, optim, &device)?;
        self.optim = self.optim.clone().load_record(record);
        Ok(())
    }
}

/// Scales every gradient so that their global L2 norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_`); returns the norm before clipping.
fn clip_global_norm(model: &Model, grads: &mut GradientsParams, max_norm: f32) -> f32 {
    struct Ids(Vec<(ParamId, usize)>);
    impl<B: Backend> ModuleVisitor<B> for Ids {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push((param.id, D));
        }
    }
    let mut ids = Ids(Vec::new());
    model.visit(&mut ids);
    type Inner = Cpu;
    let mut sq = 0.0f64;
    for &(id, rank) in &ids.0 {
        sq += match rank {
            1 => grads
                .get::<Inner, 1>(id)
                .map_or(0.0, |g| host(g.powi_scalar(2).sum())[0] as f64),
            2 => grads
                .get::<Inner, 2>(id)
                .map_or(0.0, |g| host(g.powi_scalar(2).sum())[0] as f64),
            _ => 0.0,
        };
    }
    let norm = sq.sqrt() as f32;
    if norm > max_norm && norm.is_finite() {
        let scale = max_norm / (norm + 1e-6);
        for &(id, rank) in &ids.0 {
            match rank {
                1 => {
                    if let Some(g) = grads.remove::<Inner, 1>(id) {
                        grads.register(id, g * scale);
                    }
                }
                2 => {
                    if let Some(g) = grads.remove::<Inner, 2>(id) {
                        grads.register(id, g * scale);
                    }
                }
                _ => {}
            }
        }
    }
    norm
}

/// Polyak averaging of `target` towards `online`: `tau * online + (1 - tau) * target`, parameter
/// by parameter (same architecture).
pub fn polyak(target: Policy<Cpu>, online: &Policy<Cpu>, tau: f32) -> Policy<Cpu> {
    use burn::module::ModuleMapper;
    use burn::tensor::TensorData;
    struct Values(Vec<TensorData>);
    impl ModuleVisitor<Cpu> for Values {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Cpu, D>>) {
            self.0.push(param.val().into_data());
        }
    }
    struct Blend {
        values: std::vec::IntoIter<TensorData>,
        tau: f32,
    }
    impl ModuleMapper<Cpu> for Blend {
        fn map_float<const D: usize>(
            &mut self,
            param: Param<Tensor<Cpu, D>>,
        ) -> Param<Tensor<Cpu, D>> {
            let (id, tensor, mapper) = param.consume();
            let online = self.values.next().expect("same architecture");
            let online = Tensor::<Cpu, D>::from_data(online, &tensor.device());
            let blended = online * self.tau + tensor * (1.0 - self.tau);
            Param::from_mapped_value(id, blended, mapper)
        }
    }
    let mut values = Values(Vec::new());
    online.visit(&mut values);
    target.map(&mut Blend {
        values: values.0.into_iter(),
        tau,
    })
}

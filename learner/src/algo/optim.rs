//! What PPO, DQN and behaviour cloning share besides the [`Algorithm`](super::Algorithm)
//! interface: the trained model with its Adam optimizer ([`Trainee`]: one gradient step with
//! global-norm clipping, and the checkpoint bytes of both), Polyak averaging of a target
//! network ([`polyak`]), and the bytes of an algorithm's host state ([`encode`], [`decode`]).

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamConfig, GradientsParams, Optimizer};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use common::backend::{to_vec as host, CpuAutodiff};
use common::policy::{Policy, PolicyConfig};

/// The model under training, on the training backend `B` (`CpuAutodiff`, or `CudaAutodiff` in a
/// `cuda` build).
pub type Model<B = CpuAutodiff> = Policy<B>;
pub(crate) type Optim<B> = OptimizerAdaptor<Adam, Model<B>, B>;

/// A policy (or Q-network) under training on backend `B`.
pub struct Trainee<B: AutodiffBackend> {
    pub model: Model<B>,
    optim: Optim<B>,
}

impl<B: AutodiffBackend> Trainee<B> {
    /// A freshly initialised model on `device` (weights from `seed` alone).
    pub fn new(policy: &PolicyConfig, seed: u64, device: &B::Device) -> anyhow::Result<Self> {
        Ok(Trainee {
            model: policy.init_seeded(seed, device)?,
            optim: AdamConfig::new().with_epsilon(1e-5).init(),
        })
    }

    /// The model without autodiff (inference copy, on the same device).
    pub fn inference(&self) -> Policy<B::InnerBackend> {
        self.model.valid()
    }

    /// The device the model lives on.
    pub fn device(&self) -> B::Device {
        self.model.policy_head.weight.val().device()
    }

    /// Backpropagates `loss`, clips the gradients' global norm to `max_norm` and takes one
    /// Adam step with learning rate `lr`; returns the norm before clipping. Under several
    /// learner ranks the gradients are summed over the group first; a rank lost there is the
    /// error, and no step is taken.
    pub fn step(
        &mut self,
        loss: Tensor<B, 1>,
        lr: f64,
        max_norm: f32,
    ) -> Result<f32, crate::ranks::RankLost> {
        let grads = loss.backward();
        let mut grads = GradientsParams::from_grads(grads, &self.model);
        if crate::ranks::world().size > 1 {
            all_reduce_grads(&self.model, &mut grads)?;
        }
        let grad_norm = clip_global_norm(&self.model, &mut grads, max_norm);
        let model = self.model.clone();
        self.model = self.optim.step(lr, model, grads);
        Ok(grad_norm)
    }

    /// The model record and the optimizer state, as bytes (checkpoints): host data, the same
    /// whichever device trained them. With `optim`, that optimizer's state instead of this one's
    /// (PPO's flat update keeps Adam's moments itself and puts them into a copy of this one,
    /// so the checkpoint format is the same).
    pub fn save_state(&self, optim: Option<Optim<B>>) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let model = Recorder::<B>::record(&recorder, self.model.clone().into_record(), ())?;
        let optim = optim.as_ref().unwrap_or(&self.optim).to_record();
        let optim = Recorder::<B>::record(&recorder, optim, ())?;
        Ok((model, optim))
    }

    /// burn's optimizer: what [`load_state`](Self::load_state) or burn's own steps left in it.
    pub(crate) fn optim(&self) -> &Optim<B> {
        &self.optim
    }

    /// Restores what [`save_state`](Self::save_state) wrote (on any device) onto this model's
    /// device.
    pub fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let device = self.device();
        let record = Recorder::<B>::load(&recorder, model, &device)?;
        self.model = self.model.clone().load_record(record);
        let record = Recorder::<B>::load(&recorder, optim, &device)?;
        self.optim = self.optim.clone().load_record(record);
        Ok(())
    }
}

/// Sums `grads` over every learner rank ([`crate::ranks::all_reduce_gradient`]): read into one
/// flat host buffer in the model's parameter order, reduced, and written back (each rank's loss
/// divides by the group's count, so the sum is the gradient of the group's minibatch).
fn all_reduce_grads<B: AutodiffBackend>(
    model: &Model<B>,
    grads: &mut GradientsParams,
) -> Result<(), crate::ranks::RankLost> {
    /// Reads every gradient into `flat` (`back` None), or writes `back` into them.
    struct Flat<'a, B: AutodiffBackend> {
        grads: &'a mut GradientsParams,
        flat: Vec<f32>,
        back: Option<std::vec::IntoIter<f32>>,
        device: Option<burn::tensor::Device<B::InnerBackend>>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Flat<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            match self.back.as_mut() {
                None => {
                    if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
                        self.device.get_or_insert_with(|| g.device());
                        self.flat.extend(host(g));
                    }
                }
                Some(back) => {
                    let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
                        return;
                    };
                    let shape = g.shape();
                    let values: Vec<f32> = back.take(shape.num_elements()).collect();
                    let device = self.device.as_ref().expect("read before written");
                    let data = burn::tensor::TensorData::new(values, shape);
                    self.grads.register(
                        param.id,
                        Tensor::<B::InnerBackend, D>::from_data(data, device),
                    );
                }
            }
        }
    }
    let mut visitor = Flat::<B> {
        grads,
        flat: Vec::new(),
        back: None,
        device: None,
    };
    model.visit(&mut visitor);
    crate::ranks::all_reduce_gradient(&mut visitor.flat)?;
    visitor.back = Some(std::mem::take(&mut visitor.flat).into_iter());
    model.visit(&mut visitor);
    Ok(())
}

/// Scales every gradient so that their global L2 norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_`); returns the norm before clipping.
fn clip_global_norm<B: AutodiffBackend>(
    model: &Model<B>,
    grads: &mut GradientsParams,
    max_norm: f32,
) -> f32 {
    /// Sums the squared gradients (`scale` None), or multiplies them by `scale`.
    struct Grads<'a> {
        grads: &'a mut GradientsParams,
        scale: Option<f32>,
        sq: f64,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Grads<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            match self.scale {
                None => {
                    if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
                        self.sq += host(g.powi_scalar(2).sum())[0] as f64;
                    }
                }
                Some(scale) => {
                    if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
                        self.grads.register(param.id, g * scale);
                    }
                }
            }
        }
    }
    let mut visitor = Grads {
        grads,
        scale: None,
        sq: 0.0,
    };
    model.visit(&mut visitor);
    let norm = visitor.sq.sqrt() as f32;
    if norm > max_norm && norm.is_finite() {
        visitor.scale = Some(max_norm / (norm + 1e-6));
        model.visit(&mut visitor);
    }
    norm
}

/// Polyak averaging of `target` towards `online`: `tau * online + (1 - tau) * target`, parameter
/// by parameter (same architecture).
pub fn polyak<B: Backend>(target: Policy<B>, online: &Policy<B>, tau: f32) -> Policy<B> {
    use burn::module::ModuleMapper;
    struct Values<B: Backend>(Vec<burn::tensor::TensorPrimitive<B>>);
    impl<B: Backend> ModuleVisitor<B> for Values<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.val().into_primitive());
        }
    }
    struct Blend<B: Backend> {
        values: std::vec::IntoIter<burn::tensor::TensorPrimitive<B>>,
        tau: f32,
    }
    impl<B: Backend> ModuleMapper<B> for Blend<B> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, tensor, mapper) = param.consume();
            let online = self.values.next().expect("same architecture");
            let online = Tensor::<B, D>::from_primitive(online);
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

/// `value` as the bytes of a [`Checkpointed::host_state`](common::checkpoint::Checkpointed).
pub fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("plain values encode")
}

/// What [`encode`] wrote.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> anyhow::Result<T> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, bincode::config::standard())?;
    anyhow::ensure!(
        used == bytes.len(),
        "{} bytes left over",
        bytes.len() - used
    );
    Ok(value)
}

//! Where each trained parameter of a [`Policy`] sits in the fused update's flat buffer, and the
//! copies between that buffer and the burn module (which stays the model of record: weights
//! blobs, checkpoints, the critic and evaluation read it).

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use common::backend::to_vec as host;
use common::policy::image::ImageEncoder;
use common::policy::Policy;
use recur_rnn::encoder::EncoderLayer;

/// One parameter tensor: its id in the burn module and its place in the flat buffer.
#[derive(Clone, Debug)]
pub struct Slot {
    pub id: ParamId,
    pub offset: usize,
    pub shape: Vec<usize>,
}

impl Slot {
    /// Where the parameter's values sit in the flat buffer.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.shape.iter().product::<usize>()
    }
}

/// A linear layer's slots: burn's `weight` `[in, out]` and `bias` `[out]`.
#[derive(Clone, Debug)]
pub struct DenseSlots {
    pub weight: Slot,
    pub bias: Slot,
    pub input: usize,
    pub output: usize,
}

/// A recurrent layer's slots (PyTorch's layout: `W_ih` `[G*H, in]`, `W_hh` `[G*H, H]`).
#[derive(Clone, Debug)]
pub struct CoreSlots {
    pub w_ih: Slot,
    pub w_hh: Slot,
    pub b_ih: Option<Slot>,
    pub b_hh: Option<Slot>,
    pub input: usize,
}

/// One image's convolutional encoder: each parameter's torch name (the name
/// [`recur_rnn::encoder::Encoder`] knows it by) and slot, and whether burn keeps it transposed
/// (the linear weight: burn `[flat, features]`, torch `[features, flat]`).
#[derive(Clone, Debug)]
pub struct CnnSlots {
    pub params: Vec<(String, Slot, bool)>,
    pub features: usize,
}

/// Every trained parameter of a policy (all but the observation normalizer, which no
/// gradient reaches), in module order.
#[derive(Clone, Debug)]
pub struct Layout {
    pub encoder: Vec<DenseSlots>,
    /// One per image of the pixels lane.
    pub cnn: Vec<CnnSlots>,
    pub core: Vec<CoreSlots>,
    pub policy_head: DenseSlots,
    pub value_head: DenseSlots,
    pub total: usize,
}

struct Builder {
    offset: usize,
}

impl Builder {
    fn slot<B: Backend, const D: usize>(&mut self, p: &Param<Tensor<B, D>>) -> Slot {
        let shape = p.val().dims().to_vec();
        let slot = Slot {
            id: p.id,
            offset: self.offset,
            shape,
        };
        self.offset = slot.range().end;
        slot
    }

    fn dense<B: Backend>(&mut self, l: &burn::nn::Linear<B>) -> DenseSlots {
        let weight = self.slot(&l.weight);
        let bias = l
            .bias
            .as_ref()
            .expect("the policy's linear layers have biases");
        let bias = self.slot(bias);
        DenseSlots {
            input: weight.shape[0],
            output: weight.shape[1],
            weight,
            bias,
        }
    }
}

impl Builder {
    fn cnn<B: Backend>(&mut self, e: &ImageEncoder<B>) -> CnnSlots {
        let mut params = Vec::new();
        let mut convs = e.convs.iter();
        for (i, layer) in e.spec().config.layers.iter().enumerate() {
            if let EncoderLayer::Conv { .. } = layer {
                let conv = convs.next().expect("one conv per conv layer");
                params.push((format!("convs.{i}.weight"), self.slot(&conv.weight), false));
                let bias = conv.bias.as_ref().expect("convs have biases");
                params.push((format!("convs.{i}.bias"), self.slot(bias), false));
            }
        }
        params.push(("linear.weight".into(), self.slot(&e.linear.weight), true));
        let bias = e.linear.bias.as_ref().expect("the linear layer has a bias");
        params.push(("linear.bias".into(), self.slot(bias), false));
        CnnSlots {
            params,
            features: e.features(),
        }
    }
}

impl Layout {
    /// The layout of `model`'s parameters (the actor core's; a separate critic core is not
    /// supported by the fused update).
    pub fn of<B: Backend>(model: &Policy<B>) -> Self {
        let mut b = Builder { offset: 0 };
        let encoder = model.encoder.iter().map(|l| b.dense(l)).collect();
        let cnn = model.cnn.iter().map(|e| b.cnn(e)).collect();
        let core = model
            .core
            .layers
            .iter()
            .map(|l| {
                let w_ih = b.slot(&l.weight_ih);
                CoreSlots {
                    input: w_ih.shape[1],
                    w_ih,
                    w_hh: b.slot(l.weight_hh.as_ref().expect("LSTM and GRU layers have W_hh")),
                    b_ih: l.bias_ih.as_ref().map(|p| b.slot(p)),
                    b_hh: l.bias_hh.as_ref().map(|p| b.slot(p)),
                }
            })
            .collect();
        let policy_head = b.dense(&model.policy_head);
        let value_head = b.dense(&model.value_head);
        Layout {
            encoder,
            cnn,
            core,
            policy_head,
            value_head,
            total: b.offset,
        }
    }

    /// Every slot, in module order.
    pub fn slots(&self) -> Vec<&Slot> {
        let mut all = Vec::new();
        for d in &self.encoder {
            all.extend([&d.weight, &d.bias]);
        }
        for c in &self.cnn {
            all.extend(c.params.iter().map(|(_, s, _)| s));
        }
        for c in &self.core {
            all.extend([&c.w_ih, &c.w_hh]);
            all.extend(c.b_ih.iter().chain(&c.b_hh));
        }
        for d in [&self.policy_head, &self.value_head] {
            all.extend([&d.weight, &d.bias]);
        }
        all
    }

    /// The module's parameter values, flat.
    pub fn read<B: Backend>(&self, model: &Policy<B>) -> Vec<f32> {
        struct Read<'a> {
            at: HashMap<ParamId, std::ops::Range<usize>>,
            out: &'a mut [f32],
        }
        impl<B: Backend> burn::module::ModuleVisitor<B> for Read<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                if let Some(range) = self.at.get(&param.id) {
                    self.out[range.clone()].copy_from_slice(&host(param.val()));
                }
            }
        }
        let mut out = vec![0.0f32; self.total];
        model.visit(&mut Read {
            at: self.ranges(),
            out: &mut out,
        });
        out
    }

    /// `model` with its parameters set to `values` (flat, this layout); tracked parameters
    /// stay tracked.
    pub fn write<B: Backend>(&self, model: Policy<B>, values: &[f32]) -> Policy<B> {
        struct Write<'a> {
            at: HashMap<ParamId, std::ops::Range<usize>>,
            values: &'a [f32],
        }
        impl<B: Backend> ModuleMapper<B> for Write<'_> {
            fn map_float<const D: usize>(
                &mut self,
                param: Param<Tensor<B, D>>,
            ) -> Param<Tensor<B, D>> {
                let Some(range) = self.at.get(&param.id).cloned() else {
                    return param;
                };
                let (id, tensor, mapper) = param.consume();
                let data = TensorData::new(self.values[range].to_vec(), tensor.dims());
                let new = Tensor::from_data(data, &tensor.device())
                    .set_require_grad(tensor.is_require_grad());
                Param::from_mapped_value(id, new, mapper)
            }
        }
        assert_eq!(values.len(), self.total, "values match the layout");
        model.map(&mut Write {
            at: self.ranges(),
            values,
        })
    }

    fn ranges(&self) -> HashMap<ParamId, std::ops::Range<usize>> {
        self.slots()
            .into_iter()
            .map(|s| (s.id, s.range()))
            .collect()
    }
}

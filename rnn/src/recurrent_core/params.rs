//! [`RecurrentCore`]'s parameters by PyTorch name and layout: per layer `weight_ih_l{k}`
//! `[G*H, in]`, `weight_hh_l{k}` `[G*H, H]`, `bias_ih_l{k}`, `bias_hh_l{k}` `[G*H]` (minGRU:
//! `weight_z_l{k}`, `weight_h_l{k}`, `bias_z_l{k}`, `bias_h_l{k}`, the row halves of its stacked
//! input weights), listed, read, loaded from a PyTorch `state_dict` and read back as gradients.

use std::collections::HashMap;

use burn::module::Param;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};

use super::RecurrentCore;
use crate::{CellKind, RecurrentError};

impl<B: Backend> RecurrentCore<B> {
    /// Parameter names in PyTorch's canonical order: per layer `weight_ih_l{k}`,
    /// `weight_hh_l{k}`, then (with bias) `bias_ih_l{k}`, `bias_hh_l{k}`; for minGRU
    /// `weight_z_l{k}`, `weight_h_l{k}`, `bias_z_l{k}`, `bias_h_l{k}`.
    pub fn param_names(&self) -> Vec<String> {
        self.named_tensors().into_iter().map(|n| n.name).collect()
    }

    /// Every parameter by PyTorch name, as data (row-major, PyTorch's layout).
    pub fn named_parameters(&self) -> Vec<(String, TensorData)> {
        self.named_tensors()
            .into_iter()
            .map(|n| (n.name, n.tensor.rows(n.rows).data()))
            .collect()
    }

    /// Replaces every parameter from `params` (PyTorch names and layouts, e.g. an
    /// `nn.LSTM`'s `state_dict`). Every parameter must be given exactly once, with its shape;
    /// unknown names are rejected.
    pub fn load_parameters(
        mut self,
        params: impl IntoIterator<Item = (String, TensorData)>,
    ) -> Result<Self, RecurrentError> {
        let mut given: HashMap<String, TensorData> = HashMap::new();
        for (name, data) in params {
            if given.insert(name.clone(), data).is_some() {
                return Err(param_error(&name, "given twice"));
            }
        }
        let named = self.named_tensors();
        let known: Vec<&str> = named.iter().map(|n| n.name.as_str()).collect();
        if let Some(unknown) = given.keys().find(|n| !known.contains(&n.as_str())) {
            return Err(param_error(
                unknown,
                &format!("not a parameter of this module (expected one of {known:?})"),
            ));
        }
        // Each layer tensor's values, its named row blocks concatenated in order.
        let mut values: HashMap<(usize, Slot), Vec<f32>> = HashMap::new();
        for n in &named {
            let mut shape = n.tensor.dims();
            shape[0] = n.rows.len();
            let data = given
                .remove(&n.name)
                .ok_or_else(|| param_error(&n.name, "missing"))?;
            if data.shape.to_vec() != shape {
                return Err(param_error(
                    &n.name,
                    &format!("has shape {:?}, expected {:?}", data.shape.to_vec(), shape),
                ));
            }
            let data = data.convert::<f32>().to_vec::<f32>().expect("f32 data");
            values.entry((n.layer, n.slot)).or_default().extend(data);
        }
        for (k, layer) in self.layers.iter_mut().enumerate() {
            let mut take = |slot: Slot| values.remove(&(k, slot)).expect("every slot is named");
            layer.weight_ih = reload(&layer.weight_ih, take(Slot::WeightIh));
            layer.weight_hh = layer
                .weight_hh
                .as_ref()
                .map(|p| reload(p, take(Slot::WeightHh)));
            layer.bias_ih = layer
                .bias_ih
                .as_ref()
                .map(|p| reload(p, take(Slot::BiasIh)));
            layer.bias_hh = layer
                .bias_hh
                .as_ref()
                .map(|p| reload(p, take(Slot::BiasHh)));
        }
        Ok(self)
    }

    /// Every named parameter: the layer tensor it lives in and its block of rows (minGRU's
    /// `weight_z`/`weight_h` are the two row halves of the layer's stacked `weight_ih`).
    fn named_tensors(&self) -> Vec<Named<B>> {
        let mut out = Vec::new();
        let h = self.hidden_size();
        for (k, layer) in self.layers.iter().enumerate() {
            let mut push = |slot: Slot, tensor: NamedTensor<B>| {
                let rows = tensor.dims()[0];
                let blocks: Vec<(String, std::ops::Range<usize>)> = match self.cell {
                    CellKind::MinGru => vec![
                        (format!("{}_z_l{k}", slot.kind()), 0..h),
                        (format!("{}_h_l{k}", slot.kind()), h..2 * h),
                    ],
                    _ => vec![(format!("{}_l{k}", slot.torch_name()), 0..rows)],
                };
                for (name, rows) in blocks {
                    out.push(Named {
                        name,
                        layer: k,
                        slot,
                        tensor: tensor.clone(),
                        rows,
                    });
                }
            };
            push(Slot::WeightIh, NamedTensor::Matrix(layer.weight_ih.val()));
            if let Some(w) = &layer.weight_hh {
                push(Slot::WeightHh, NamedTensor::Matrix(w.val()));
            }
            if let Some(b) = &layer.bias_ih {
                push(Slot::BiasIh, NamedTensor::Vector(b.val()));
            }
            if let Some(b) = &layer.bias_hh {
                push(Slot::BiasHh, NamedTensor::Vector(b.val()));
            }
        }
        out
    }
}

impl<B: AutodiffBackend> RecurrentCore<B> {
    /// The gradient of every parameter by PyTorch name (zeros where the loss did not reach it).
    pub fn named_grads(&self, grads: &B::Gradients) -> Vec<(String, TensorData)> {
        self.named_tensors()
            .into_iter()
            .map(|n| (n.name, n.tensor.grad(grads, n.rows)))
            .collect()
    }
}

/// A layer's parameter tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Slot {
    WeightIh,
    WeightHh,
    BiasIh,
    BiasHh,
}

impl Slot {
    /// `weight_ih` ... as PyTorch's RNNs name it (before the `_l{k}` suffix).
    fn torch_name(self) -> &'static str {
        match self {
            Slot::WeightIh => "weight_ih",
            Slot::WeightHh => "weight_hh",
            Slot::BiasIh => "bias_ih",
            Slot::BiasHh => "bias_hh",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Slot::WeightIh | Slot::WeightHh => "weight",
            Slot::BiasIh | Slot::BiasHh => "bias",
        }
    }
}

/// One named parameter: rows `rows` of a layer's `slot` tensor.
struct Named<B: Backend> {
    name: String,
    layer: usize,
    slot: Slot,
    tensor: NamedTensor<B>,
    rows: std::ops::Range<usize>,
}

/// A parameter of rank 2 (weights) or 1 (biases).
#[derive(Clone)]
enum NamedTensor<B: Backend> {
    Matrix(Tensor<B, 2>),
    Vector(Tensor<B, 1>),
}

impl<B: Backend> NamedTensor<B> {
    fn dims(&self) -> Vec<usize> {
        match self {
            NamedTensor::Matrix(t) => t.dims().to_vec(),
            NamedTensor::Vector(t) => t.dims().to_vec(),
        }
    }

    /// Rows `rows` (all of them: the tensor itself).
    fn rows(self, rows: std::ops::Range<usize>) -> Self {
        match self {
            NamedTensor::Matrix(t) if rows.len() < t.dims()[0] => {
                NamedTensor::Matrix(t.slice_dim(0, rows))
            }
            NamedTensor::Vector(t) if rows.len() < t.dims()[0] => {
                NamedTensor::Vector(t.slice_dim(0, rows))
            }
            whole => whole,
        }
    }

    fn data(self) -> TensorData {
        match self {
            NamedTensor::Matrix(t) => t.into_data(),
            NamedTensor::Vector(t) => t.into_data(),
        }
    }
}

impl<B: AutodiffBackend> NamedTensor<B> {
    /// The gradient of rows `rows` (zeros where the loss did not reach the tensor).
    fn grad(self, grads: &B::Gradients, rows: std::ops::Range<usize>) -> TensorData {
        match self {
            NamedTensor::Matrix(t) => t
                .grad(grads)
                .unwrap_or_else(|| t.inner().zeros_like())
                .slice_dim(0, rows)
                .into_data(),
            NamedTensor::Vector(t) => t
                .grad(grads)
                .unwrap_or_else(|| t.inner().zeros_like())
                .slice_dim(0, rows)
                .into_data(),
        }
    }
}

/// `p` with its values replaced by `values` (same shape, device and `require_grad`).
fn reload<B: Backend, const D: usize>(
    p: &Param<Tensor<B, D>>,
    values: Vec<f32>,
) -> Param<Tensor<B, D>> {
    let old = p.val();
    let data = TensorData::new(values, old.dims());
    Param::from_tensor(Tensor::from_data(data, &old.device())).set_require_grad(p.is_require_grad())
}

fn param_error(name: &str, problem: &str) -> RecurrentError {
    RecurrentError::Parameter {
        name: name.to_string(),
        problem: problem.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::gru;
    use super::*;
    use crate::burn_backend::{cpu_device, Cpu};
    use crate::{RecurrentBackend, RecurrentConfig};

    #[test]
    fn load_parameters_checks_names_and_shapes() {
        let core = gru(RecurrentConfig::new(3, 4)).unwrap();
        let mut params = core.named_parameters();
        assert_eq!(
            core.param_names(),
            ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
        );
        // Round trip.
        let again = gru(RecurrentConfig::new(3, 4))
            .unwrap()
            .load_parameters(params.clone())
            .unwrap();
        assert_eq!(again.named_parameters(), params);
        // Wrong shape, unknown name, missing parameter.
        let wrong = TensorData::new(vec![0.0f32; 12], [12, 1]);
        let mut bad = params.clone();
        bad[0].1 = wrong;
        let err = gru(RecurrentConfig::new(3, 4))
            .unwrap()
            .load_parameters(bad)
            .unwrap_err();
        assert!(
            err.to_string().contains("weight_ih_l0") && err.to_string().contains("[12, 3]"),
            "{err}"
        );
        let mut bad = params.clone();
        bad.push(("weight_ih_l1".into(), TensorData::new(vec![0.0f32; 1], [1])));
        let err = gru(RecurrentConfig::new(3, 4))
            .unwrap()
            .load_parameters(bad)
            .unwrap_err();
        assert!(
            err.to_string().contains("`weight_ih_l1`: not a parameter"),
            "{err}"
        );
        params.pop();
        let err = gru(RecurrentConfig::new(3, 4))
            .unwrap()
            .load_parameters(params)
            .unwrap_err();
        assert!(err.to_string().contains("`bias_hh_l0`: missing"), "{err}");
    }

    /// minGRU's parameters carry the reference's names and shapes and round-trip; a backend
    /// without fused kernels refuses `fused`, naming the module.
    #[test]
    fn mingru_parameters_are_named_and_round_trip() {
        let device = cpu_device();
        let config = RecurrentConfig::new(3, 4).with_num_layers(2);
        let core = RecurrentCore::<Cpu>::new(&config, CellKind::MinGru, &device).unwrap();
        assert_eq!(
            core.param_names(),
            [
                "weight_z_l0",
                "weight_h_l0",
                "bias_z_l0",
                "bias_h_l0",
                "weight_z_l1",
                "weight_h_l1",
                "bias_z_l1",
                "bias_h_l1"
            ]
        );
        let params = core.named_parameters();
        assert_eq!(params[0].1.shape.to_vec(), [4, 3]);
        assert_eq!(params[4].1.shape.to_vec(), [4, 4]);
        assert_eq!(params[3].1.shape.to_vec(), [4]);
        // Distinct values per name: loading puts each block back in its own rows.
        let numbered: Vec<(String, TensorData)> = params
            .iter()
            .enumerate()
            .map(|(k, (name, data))| {
                let n = data.num_elements();
                let v: Vec<f32> = (0..n).map(|i| (k * 100 + i) as f32).collect();
                (name.clone(), TensorData::new(v, data.shape.clone()))
            })
            .collect();
        let loaded = RecurrentCore::<Cpu>::new(&config, CellKind::MinGru, &device)
            .unwrap()
            .load_parameters(numbered.clone())
            .unwrap();
        assert_eq!(loaded.named_parameters(), numbered);
        let stacked = loaded.layers[0]
            .weight_ih
            .val()
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(stacked[..3], [0.0, 1.0, 2.0]);
        assert_eq!(stacked[12..15], [100.0, 101.0, 102.0]);
        assert!(loaded.layers[0].weight_hh.is_none() && loaded.layers[0].bias_hh.is_none());
        let mut bad = numbered;
        bad[1].1 = TensorData::new(vec![0.0f32; 8], [8, 1]);
        let err = RecurrentCore::<Cpu>::new(&config, CellKind::MinGru, &device)
            .unwrap()
            .load_parameters(bad)
            .unwrap_err();
        assert!(
            err.to_string().contains("weight_h_l0") && err.to_string().contains("[4, 3]"),
            "{err}"
        );
        let err = "mingru2".parse::<CellKind>().unwrap_err().to_string();
        assert!(err.contains("\"mingru\""), "{err}");
        assert_eq!("mingru".parse::<CellKind>().unwrap(), CellKind::MinGru);
        let err = config
            .clone()
            .with_backend(RecurrentBackend::Fused)
            .validate(CellKind::MinGru, crate::FusedKernels::Unavailable)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("MinGruModule") && err.contains("backend = \"fused\""),
            "{err}"
        );
    }

    #[test]
    fn no_bias_means_no_bias_parameters() {
        let core = gru(RecurrentConfig::new(3, 4)
            .with_bias(false)
            .with_num_layers(2))
        .unwrap();
        assert_eq!(
            core.param_names(),
            [
                "weight_ih_l0",
                "weight_hh_l0",
                "weight_ih_l1",
                "weight_hh_l1"
            ]
        );
    }
}

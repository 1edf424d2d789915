//! [`RecurrentCore`]: the multi-layer LSTM/GRU/minGRU shared by
//! [`LstmModule`](super::LstmModule), [`GruModule`](super::GruModule) and
//! [`MinGruModule`](super::MinGruModule), with both execution modes. Its parameters by
//! PyTorch name (list, load, gradients) are in [`params`].

mod params;

use burn::module::Module;
use burn::nn::DropoutConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, DType, Tensor, TensorData};

use super::backend::{fused, fused_kernels, pad, scan, CellState, Segments};
use super::layer::RecurrentLayer;
use super::{
    current_recurrent_mode, CellKind, Primer, PrimerEntry, RecurrentBackend, RecurrentConfig,
    RecurrentError, RecurrentMode, RecurrentOutput, RecurrentState,
};

/// A stack of LSTM, GRU or minGRU layers with TorchRL's two execution modes.
///
/// - **Sequential** ([`forward`](Self::forward) on `[N, ...]`): one step of `N` environments;
///   the incoming state is zeroed where `is_init` is true.
/// - **Recurrent** ([`forward`](Self::forward) on a flat packed `[N]` time axis, or
///   [`forward_batch`](Self::forward_batch) on `[B, T]`): at every `is_init` position (and at
///   `t = 0` of every row) the state is replaced by the state *stored at that position*;
///   `features` are the last layer's `h` at every step; the `next` state holds the post-step
///   state at the last step of every segment and zeros elsewhere. Nothing crosses an
///   `is_init` boundary, in the outputs or in the gradients.
///
/// The mode is this thread's [`set_recurrent_mode`](super::set_recurrent_mode) if a guard is
/// alive, else the module's `default_recurrent_mode`.
#[derive(Module, Debug)]
pub struct RecurrentCore<B: Backend> {
    pub layers: Vec<RecurrentLayer<B>>,
    #[module(skip)]
    cell: CellKind,
    #[module(skip)]
    config: RecurrentConfig,
}

impl<B: Backend> RecurrentCore<B> {
    /// Builds the layers with PyTorch's initialisation after validating `config`.
    pub fn new(
        config: &RecurrentConfig,
        cell: CellKind,
        device: &B::Device,
    ) -> Result<Self, RecurrentError> {
        config.validate(cell, fused_kernels::<B>())?;
        let layers = (0..config.num_layers)
            .map(|l| {
                let input = if l == 0 {
                    config.input_size
                } else {
                    config.hidden_size
                };
                RecurrentLayer::init(cell, input, config.hidden_size, config.bias, device)
            })
            .collect();
        Ok(Self {
            layers,
            cell,
            config: config.clone(),
        })
    }

    pub fn cell(&self) -> CellKind {
        self.cell
    }

    pub fn config(&self) -> &RecurrentConfig {
        &self.config
    }

    pub fn input_size(&self) -> usize {
        self.config.input_size
    }

    pub fn hidden_size(&self) -> usize {
        self.config.hidden_size
    }

    pub fn num_layers(&self) -> usize {
        self.config.num_layers
    }

    /// The backend recurrent-mode calls use (`auto` resolved for this tensor backend).
    pub fn backend(&self) -> RecurrentBackend {
        self.config
            .backend
            .resolve_for(fused_kernels::<B>().available())
    }

    /// The mode a call made now on this thread runs in.
    pub fn recurrent_mode(&self) -> RecurrentMode {
        current_recurrent_mode().unwrap_or(self.config.default_recurrent_mode)
    }

    /// The recurrent-state entries an environment needs: `rs_h` (and `rs_c` for an LSTM),
    /// `[num_layers, hidden_size]` per environment, `float32`.
    pub fn primer(&self) -> Primer {
        let keys: &[&'static str] = if self.cell.has_cell_state() {
            &["rs_h", "rs_c"]
        } else {
            &["rs_h"]
        };
        Primer {
            entries: keys
                .iter()
                .map(|&key| PrimerEntry {
                    key,
                    shape: [self.num_layers(), self.hidden_size()],
                    dtype: DType::F32,
                })
                .collect(),
        }
    }

    /// One call on `N` rows: `input` `[N, in]`, `is_init` `[N]`, `state` `[N, L, H]`.
    ///
    /// Sequential mode: `N` environments, one step each; returns `features` `[N, H]` and the
    /// post-step state `[N, L, H]`. Recurrent mode: `N` consecutive steps of one packed time
    /// axis (the flat layout a slice sampler returns), with the recurrent-mode semantics.
    pub fn forward(
        &self,
        input: Tensor<B, 2>,
        is_init: Tensor<B, 1, Bool>,
        state: RecurrentState<B, 3>,
    ) -> Result<RecurrentOutput<B, 2, 3>, RecurrentError> {
        let [n, _] = input.dims();
        self.check_input("input", &input.dims(), &[n], "[N, input_size]")?;
        check_shape(
            "is_init",
            &is_init.dims(),
            &[n],
            "[N] (one flag per row of input)",
        )?;
        self.check_state(&state, &[n], "[N, num_layers, hidden_size]")?;
        Ok(match self.recurrent_mode() {
            RecurrentMode::Sequential => self.step(input, is_init, state),
            RecurrentMode::Recurrent => {
                let out = self.run_recurrent(
                    input.unsqueeze_dim(0),
                    is_init.unsqueeze_dim(0),
                    state.map(|e| e.unsqueeze_dim(0)),
                );
                RecurrentOutput {
                    features: out.features.squeeze_dim(0),
                    next: out.next.map(|e| e.squeeze_dim(0)),
                }
            }
        })
    }

    /// One call on a `[B, T]` batch: `input` `[B, T, in]`, `is_init` `[B, T]`, stored
    /// `state` `[B, T, L, H]`; returns `features` `[B, T, H]` and `next` `[B, T, L, H]`.
    ///
    /// Recurrent mode runs each row as a sequence (resets at `is_init`). Sequential mode, as
    /// in TorchRL, treats the `B * T` entries as independent single steps.
    pub fn forward_batch(
        &self,
        input: Tensor<B, 3>,
        is_init: Tensor<B, 2, Bool>,
        state: RecurrentState<B, 4>,
    ) -> Result<RecurrentOutput<B, 3, 4>, RecurrentError> {
        let [b, t, _] = input.dims();
        self.check_input("input", &input.dims(), &[b, t], "[B, T, input_size]")?;
        check_shape(
            "is_init",
            &is_init.dims(),
            &[b, t],
            "[B, T] (one flag per step)",
        )?;
        self.check_state(&state, &[b, t], "[B, T, num_layers, hidden_size]")?;
        Ok(match self.recurrent_mode() {
            RecurrentMode::Recurrent => self.run_recurrent(input, is_init, state),
            RecurrentMode::Sequential => {
                let (l, h) = (self.num_layers(), self.hidden_size());
                let out = self.step(
                    input.flatten(0, 1),
                    is_init.flatten(0, 1),
                    state.map(|e| e.reshape([b * t, l, h])),
                );
                RecurrentOutput {
                    features: out.features.reshape([b, t, h]),
                    next: out.next.map(|e| e.reshape([b, t, l, h])),
                }
            }
        })
    }

    /// Sequential mode: zero the incoming state where `is_init`, then one step of every layer.
    fn step(
        &self,
        input: Tensor<B, 2>,
        is_init: Tensor<B, 1, Bool>,
        state: RecurrentState<B, 3>,
    ) -> RecurrentOutput<B, 2, 3> {
        let [n, _] = input.dims();
        let hidden = self.hidden_size();
        // On a CubeCL device the fused kernel takes the step as one step of recurrent mode
        // from the zeroed incoming state, so both modes multiply at the core's
        // `matmul_precision` (burn's own matmul stages f32 through tf32 on tensor cores).
        #[cfg(any(feature = "cuda", feature = "wgpu"))]
        if self.backend() == RecurrentBackend::Fused && super::backend::cube::available::<B>() {
            let layers = self.num_layers();
            let reset = is_init
                .clone()
                .reshape([n, 1, 1])
                .expand([n, layers, hidden]);
            let out = self.run_recurrent(
                input.unsqueeze_dim(1),
                is_init.unsqueeze_dim(1),
                state.map(|e| e.mask_fill(reset.clone(), 0.0).unsqueeze_dim(1)),
            );
            return RecurrentOutput {
                features: out.features.reshape([n, hidden]),
                next: out.next.map(|e| e.reshape([n, layers, hidden])),
            };
        }
        let reset = is_init.unsqueeze_dim::<2>(1).expand([n, hidden]);
        let incoming = |e: &Tensor<B, 3>, l: usize| {
            e.clone()
                .slice_dim(1, l..l + 1)
                .reshape([n, hidden])
                .mask_fill(reset.clone(), 0.0)
        };
        let per_layer = self.run_layers(vec![input], |l, _t, _previous| {
            (
                incoming(&state.rs_h, l),
                state.rs_c.as_ref().map(|c| incoming(c, l)),
            )
        });
        let (hs, cs): (Vec<_>, Vec<_>) = per_layer
            .into_iter()
            .map(|mut states| states.pop().expect("one step"))
            .unzip();
        let features = hs.last().expect("at least one layer").clone();
        let cs: Option<Vec<_>> = cs.into_iter().collect();
        RecurrentOutput {
            features,
            next: RecurrentState {
                rs_h: Tensor::stack(hs, 1),
                rs_c: cs.map(|cs| Tensor::stack(cs, 1)),
            },
        }
    }

    /// Recurrent mode on `[B, T]`, shapes already checked.
    fn run_recurrent(
        &self,
        input: Tensor<B, 3>,
        is_init: Tensor<B, 2, Bool>,
        state: RecurrentState<B, 4>,
    ) -> RecurrentOutput<B, 3, 4> {
        let [b, t, _] = input.dims();
        let flags = host_flags(is_init.into_data());
        let segments = Segments::new(flags, b, t);
        let per_layer = match self.backend() {
            RecurrentBackend::Pad => pad::run(self, input, &segments, state),
            #[cfg(any(feature = "cuda", feature = "wgpu"))]
            RecurrentBackend::Fused if super::backend::cube::available::<B>() => {
                super::backend::cube::run(self, input, &segments, state)
            }
            RecurrentBackend::Fused => {
                if let Some(out) = fused::inference(self, &input, &segments, &state) {
                    return out;
                }
                fused::run(self, input, &segments, state)
            }
            RecurrentBackend::Scan | RecurrentBackend::Auto => {
                scan::run(self, input, &segments, state)
            }
        };
        // ("next", state): the post-step state at the last step of each segment, zero elsewhere.
        let (l, h) = (self.num_layers(), self.hidden_size());
        let ends: std::sync::Arc<[bool]> = segments.ends().into();
        let features = per_layer.last().expect("at least one layer").0.clone();
        let (hs, cs): (Vec<_>, Vec<_>) = per_layer.into_iter().unzip();
        let cs: Option<Vec<_>> = cs.into_iter().collect();
        // Each layer's states masked, then stacked on the layer axis (one layer: a reshape,
        // which shares the masked tensor's storage on the CPU).
        let next = |entries: Vec<Tensor<B, 3>>| {
            let mut masked: Vec<Tensor<B, 3>> = entries
                .into_iter()
                .map(|e| fused::keep_rows(e, &ends))
                .collect();
            if l == 1 {
                fused::reshape(masked.pop().expect("one layer"), [b, t, 1, h])
            } else {
                Tensor::stack::<4>(masked, 2)
            }
        };
        RecurrentOutput {
            features,
            next: RecurrentState {
                rs_h: next(hs),
                rs_c: cs.map(next),
            },
        }
    }

    /// Runs every layer over the per-step `inputs` (`T x [R, in]`); layer `l >= 1` reads the
    /// previous layer's output, through dropout when training. `state_at(l, t, previous)` gives
    /// the state entering step `t` of layer `l`. Returns every layer's post-step states.
    pub(crate) fn run_layers(
        &self,
        inputs: Vec<Tensor<B, 2>>,
        mut state_at: impl FnMut(usize, usize, Option<CellState<B>>) -> CellState<B>,
    ) -> Vec<Vec<CellState<B>>> {
        let dropout = DropoutConfig::new(self.config.dropout).init();
        let mut inputs = inputs;
        let mut out = Vec::with_capacity(self.layers.len());
        for (l, layer) in self.layers.iter().enumerate() {
            let states = super::backend::unroll(self.cell, layer, inputs, |t, previous| {
                state_at(l, t, previous)
            });
            inputs = states
                .iter()
                .map(|(h, _)| dropout.forward(h.clone()))
                .collect();
            out.push(states);
        }
        out
    }

    fn check_input(
        &self,
        field: &'static str,
        got: &[usize],
        lead: &[usize],
        layout: &str,
    ) -> Result<(), RecurrentError> {
        let mut want = lead.to_vec();
        want.push(self.input_size());
        check_shape(field, got, &want, layout)
    }

    fn check_state<const D: usize>(
        &self,
        state: &RecurrentState<B, D>,
        lead: &[usize],
        layout: &str,
    ) -> Result<(), RecurrentError> {
        let mut want = lead.to_vec();
        want.extend([self.num_layers(), self.hidden_size()]);
        check_shape("rs_h", &state.rs_h.dims(), &want, layout)?;
        match (&state.rs_c, self.cell.has_cell_state()) {
            (Some(c), true) => check_shape("rs_c", &c.dims(), &want, layout),
            (None, false) => Ok(()),
            (None, true) => Err(RecurrentError::State(
                "LstmModule needs rs_c (the cell state) beside rs_h; got rs_h only".into(),
            )),
            (Some(_), false) => Err(RecurrentError::State(format!(
                "{} has no cell state, but rs_c was given",
                self.cell.module_name()
            ))),
        }
    }
}

/// A bool tensor's values on the host. Backends store bools their own way (burn's wgpu
/// backend as `u32`): anything but a bool dtype is read as integers, non-zero = true.
fn host_flags(data: TensorData) -> Vec<bool> {
    match data.to_vec::<bool>() {
        Ok(flags) => flags,
        Err(_) => data
            .convert::<i32>()
            .to_vec::<i32>()
            .expect("a bool tensor's data converts to integers")
            .into_iter()
            .map(|v| v != 0)
            .collect(),
    }
}

fn check_shape(
    field: &'static str,
    got: &[usize],
    want: &[usize],
    layout: &str,
) -> Result<(), RecurrentError> {
    if got == want {
        return Ok(());
    }
    Err(RecurrentError::Shape {
        field,
        got: got.to_vec(),
        expected: format!("{want:?} ({layout})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::burn_backend::{cpu_device, Cpu};
    use crate::{set_recurrent_mode, Recompute};

    /// A GRU core on the CPU from `config` (`params`' tests build theirs here too).
    pub(super) fn gru(config: RecurrentConfig) -> Result<RecurrentCore<Cpu>, RecurrentError> {
        RecurrentCore::new(&config, CellKind::Gru, &cpu_device())
    }

    #[test]
    fn invalid_configs_name_the_key_and_value() {
        let err = gru(RecurrentConfig::new(0, 4)).unwrap_err();
        assert!(
            matches!(
                err,
                RecurrentError::Config {
                    key: "input_size",
                    ..
                }
            ),
            "{err}"
        );
        let err = gru(RecurrentConfig::new(3, 4)
            .with_dropout(1.5)
            .with_num_layers(2))
        .unwrap_err();
        assert!(err.to_string().contains("`dropout` = 1.5"), "{err}");
        let err = gru(RecurrentConfig::new(3, 4).with_dropout(0.2)).unwrap_err();
        assert!(err.to_string().contains("num_layers >= 2"), "{err}");
        let err = gru(RecurrentConfig::new(3, 4).with_num_layers(0)).unwrap_err();
        assert!(err.to_string().contains("num_layers"), "{err}");
        let err = gru(RecurrentConfig::new(3, 4)
            .with_backend(RecurrentBackend::Pad)
            .with_recompute(Recompute::Full))
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("GruModule") && msg.contains("\"pad\"") && msg.contains("\"full\""),
            "{msg}"
        );
        let err = "fused2".parse::<RecurrentBackend>().unwrap_err();
        assert!(err.to_string().contains("\"fused2\""), "{err}");
    }

    #[test]
    fn wrong_shapes_name_the_field() {
        let core = gru(RecurrentConfig::new(3, 4)).unwrap();
        let device = cpu_device();
        let state = core.primer().zeros::<Cpu>(2, &device);
        let is_init = Tensor::<Cpu, 1, Bool>::from_data([true, false], &device);
        let err = core
            .forward(
                Tensor::zeros([2, 5], &device),
                is_init.clone(),
                state.clone(),
            )
            .unwrap_err();
        assert!(
            matches!(&err, RecurrentError::Shape { field: "input", got, .. } if got == &vec![2, 5]),
            "{err}"
        );
        let err = core
            .forward(
                Tensor::zeros([2, 3], &device),
                Tensor::<Cpu, 1, Bool>::from_data([true], &device),
                state.clone(),
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                RecurrentError::Shape {
                    field: "is_init",
                    ..
                }
            ),
            "{err}"
        );
        let lstm_state = RecurrentState::lstm(state.rs_h.clone(), state.rs_h.clone());
        let err = core
            .forward(Tensor::zeros([2, 3], &device), is_init, lstm_state)
            .unwrap_err();
        assert!(err.to_string().contains("rs_c"), "{err}");
    }

    #[test]
    fn primer_describes_the_state_entries() {
        let device = cpu_device();
        let config = RecurrentConfig::new(3, 4).with_num_layers(2);
        let lstm = RecurrentCore::<Cpu>::new(&config, CellKind::Lstm, &device).unwrap();
        let primer = lstm.primer();
        let keys: Vec<_> = primer.entries.iter().map(|e| e.key).collect();
        assert_eq!(keys, ["rs_h", "rs_c"]);
        assert!(primer
            .entries
            .iter()
            .all(|e| e.shape == [2, 4] && e.dtype == DType::F32));
        let state = primer.zeros::<Cpu>(5, &device);
        assert_eq!(state.rs_h.dims(), [5, 2, 4]);
        assert_eq!(state.rs_c.as_ref().unwrap().dims(), [5, 2, 4]);
        let sum: f32 = state.rs_h.abs().sum().into_scalar();
        assert_eq!(sum, 0.0);
        let gru = RecurrentCore::<Cpu>::new(&config, CellKind::Gru, &device).unwrap();
        assert!(gru.primer().entry("rs_c").is_none());
        assert!(gru.primer().zeros::<Cpu>(5, &device).rs_c.is_none());
    }

    /// The module's default mode applies until a guard overrides it; the same flat call then
    /// means "N environments" or "one sequence of N steps".
    #[test]
    fn default_mode_and_guard_change_the_meaning_of_a_flat_call() {
        let device = cpu_device();
        let core = gru(RecurrentConfig::new(1, 2)).unwrap();
        assert_eq!(core.recurrent_mode(), RecurrentMode::Sequential);
        let recurrent_default =
            gru(RecurrentConfig::new(1, 2).with_default_recurrent_mode(RecurrentMode::Recurrent))
                .unwrap();
        assert_eq!(recurrent_default.recurrent_mode(), RecurrentMode::Recurrent);
        {
            let _g = set_recurrent_mode(false);
            assert_eq!(
                recurrent_default.recurrent_mode(),
                RecurrentMode::Sequential
            );
        }
        // Three identical rows, only the first an is_init, zero state: sequentially all three
        // rows are the same first step; recurrently rows 2 and 3 continue the sequence.
        let x = Tensor::<Cpu, 2>::ones([3, 1], &device);
        let flags = Tensor::<Cpu, 1, Bool>::from_data([true, false, false], &device);
        let state = core.primer().zeros::<Cpu>(3, &device);
        let seq = core
            .forward(x.clone(), flags.clone(), state.clone())
            .unwrap();
        let v = seq.features.into_data().to_vec::<f32>().unwrap();
        assert_eq!(v[0..2], v[2..4]);
        let _g = set_recurrent_mode(RecurrentMode::Recurrent);
        let rec = core.forward(x, flags, state).unwrap();
        let w = rec.features.into_data().to_vec::<f32>().unwrap();
        // Equal up to the activations' rounding (recurrent mode runs the fused kernels).
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        assert!(close(&w[0..2], &v[0..2]), "{w:?} vs {v:?}");
        assert!(!close(&w[2..4], &v[2..4]), "{w:?} vs {v:?}");
        // next state only at the segment end (the last row).
        let next = rec.next.rs_h.into_data().to_vec::<f32>().unwrap();
        assert!(next[0..4].iter().all(|&x| x == 0.0));
        assert_eq!(next[4..6], w[4..6]);
    }
}

//! [`LstmModule`], [`GruModule`] and [`MinGruModule`]: TorchRL's recurrent modules (and minGRU in
//! the same shape), each a typed wrapper around
//! the shared [`RecurrentCore`] (which they dereference to for `forward`, `forward_batch`,
//! `primer`, `recurrent_mode`, `param_names`, ...).

use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::TensorData;

use super::{CellKind, RecurrentConfig, RecurrentCore, RecurrentError};

macro_rules! recurrent_module {
    ($(#[$doc:meta])* $name:ident, $cell:expr, $init:ident) => {
        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $name<B: Backend> {
            pub core: RecurrentCore<B>,
        }

        impl<B: Backend> $name<B> {
            /// Builds the module after validating `config` (errors name the key and value).
            pub fn new(config: &RecurrentConfig, device: &B::Device) -> Result<Self, RecurrentError> {
                Ok(Self { core: RecurrentCore::new(config, $cell, device)? })
            }

            /// Replaces every parameter from PyTorch names and layouts (see
            /// [`RecurrentCore::load_parameters`]).
            pub fn load_parameters(
                self,
                params: impl IntoIterator<Item = (String, TensorData)>,
            ) -> Result<Self, RecurrentError> {
                Ok(Self { core: self.core.load_parameters(params)? })
            }
        }

        impl<B: Backend> std::ops::Deref for $name<B> {
            type Target = RecurrentCore<B>;
            fn deref(&self) -> &RecurrentCore<B> {
                &self.core
            }
        }

        impl RecurrentConfig {
            #[doc = concat!("Builds a [`", stringify!($name), "`] from this config.")]
            pub fn $init<B: Backend>(&self, device: &B::Device) -> Result<$name<B>, RecurrentError> {
                $name::new(self, device)
            }
        }
    };
}

recurrent_module!(
    /// A multi-layer LSTM (PyTorch's `nn.LSTM` equations and parameter layout) with TorchRL's
    /// `LSTMModule` behaviour: state entries `rs_h` and `rs_c`, sequential and recurrent
    /// modes, `is_init` resets.
    LstmModule,
    CellKind::Lstm,
    init_lstm
);

recurrent_module!(
    /// A multi-layer GRU (PyTorch's `nn.GRU` equations and parameter layout) with TorchRL's
    /// `GRUModule` behaviour: state entry `rs_h`, sequential and recurrent modes, `is_init`
    /// resets.
    GruModule,
    CellKind::Gru,
    init_gru
);

recurrent_module!(
    /// A multi-layer minGRU (Feng et al. 2024, "Were RNNs All We Needed?"): gates from the
    /// input only, `h' = (1 - z) * h + z * g(x W_h^T + b_h)`, with the same state entry
    /// (`rs_h`), modes and `is_init` resets as [`GruModule`]. Parameters `weight_z_l{k}`,
    /// `weight_h_l{k}` `[H, in]`, `bias_z_l{k}`, `bias_h_l{k}` `[H]`. No hidden-to-hidden
    /// mixing happens within a step, so depth (`num_layers >= 2`) is what mixes features over
    /// time.
    MinGruModule,
    CellKind::MinGru,
    init_mingru
);

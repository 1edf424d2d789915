//! Errors of the recurrent modules. Each names the field, the value and what was expected.

/// What went wrong building or calling a recurrent module.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecurrentError {
    /// A configuration value is out of range.
    #[error("recurrent config: `{key}` = {value} is invalid: {expected}")]
    Config {
        key: &'static str,
        value: String,
        expected: String,
    },
    /// A combination of options that this build does not support.
    #[error("unsupported recurrent configuration: {0}")]
    Unsupported(String),
    /// An input tensor has the wrong shape.
    #[error("`{field}` has shape {got:?}, expected {expected}")]
    Shape {
        field: &'static str,
        got: Vec<usize>,
        expected: String,
    },
    /// The recurrent state does not match the cell (e.g. an LSTM without `rs_c`).
    #[error("recurrent state: {0}")]
    State(String),
    /// Loading parameters by PyTorch name failed.
    #[error("parameter `{name}`: {problem}")]
    Parameter { name: String, problem: String },
}

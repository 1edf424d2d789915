//! A chunk's columns: each field's key, element type, what one step holds, and where it lives
//! in a [`Chunk`]; the encoding reads and writes them in [`FIELDS`]' order.

use super::{ActionColumn, ActionKind, Chunk, ChunkSchema, ColumnType};

/// What one step of a column holds.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum PerStep {
    /// One value.
    Scalar,
    /// `[obs_dim]`.
    Obs,
    /// `[P]` bytes, only in chunks of a schema with images.
    Pixels,
    /// One index (discrete) or `[dim]` f32 (continuous).
    Action,
    /// `[L, H]`.
    State,
    /// `[L, H]`, only in chunks of a cell with a cell state (LSTM).
    CellState,
}

/// One column: its key, element type (a continuous action's is f32), what a step holds, and
/// where it lives in a [`Chunk`] (`None` where the chunk does not hold it).
pub(super) struct Field {
    pub(super) key: &'static str,
    pub(super) dtype: ColumnType,
    pub(super) per_step: PerStep,
    pub(super) get: fn(&Chunk) -> Option<Column<'_>>,
    pub(super) get_mut: fn(&mut Chunk) -> Option<ColumnMut<'_>>,
}

impl Field {
    /// Whether `schema`'s chunks hold this column.
    pub(super) fn present(&self, schema: &ChunkSchema) -> bool {
        match self.per_step {
            PerStep::CellState => schema.cell.has_cell_state(),
            PerStep::Pixels => schema.pixels() > 0,
            _ => true,
        }
    }

    /// The element type and per-step shape in `s`'s chunks, `None` where they do not hold it.
    pub(super) fn spec(&self, s: &ChunkSchema) -> Option<(ColumnType, Vec<usize>)> {
        match (self.per_step, s.action) {
            _ if !self.present(s) => None,
            (PerStep::Action, ActionKind::Continuous { dim }) => Some((ColumnType::F32, vec![dim])),
            (PerStep::Action, ActionKind::MultiDiscrete { dim }) => {
                Some((ColumnType::I64, vec![dim]))
            }
            (PerStep::Scalar | PerStep::Action, _) => Some((self.dtype, vec![])),
            (PerStep::Obs, _) => Some((self.dtype, vec![s.obs_dim])),
            (PerStep::Pixels, _) => Some((self.dtype, vec![s.pixels()])),
            (PerStep::State | PerStep::CellState, _) => {
                Some((self.dtype, vec![s.num_layers, s.hidden_size]))
            }
        }
    }
}

/// A [`Field`] held in a plain vector of [`Chunk`] (a pixels column: only where the schema has
/// images, the vector empty elsewhere).
macro_rules! field {
    ($key:literal, Pixels, $member:ident) => {
        Field {
            key: $key,
            dtype: ColumnType::U8,
            per_step: PerStep::Pixels,
            get: |c| (!c.$member.is_empty()).then_some(Column::U8(&c.$member)),
            get_mut: |c| (!c.$member.is_empty()).then_some(ColumnMut::U8(&mut c.$member)),
        }
    };
    ($key:literal, $per_step:ident, $dtype:ident, $member:ident) => {
        Field {
            key: $key,
            dtype: ColumnType::$dtype,
            per_step: PerStep::$per_step,
            get: |c| Some(Column::$dtype(&c.$member)),
            get_mut: |c| Some(ColumnMut::$dtype(&mut c.$member)),
        }
    };
}

/// The chunk's columns in encoding order: the one list that the schema's fields, validation,
/// encoding and decoding walk.
pub(super) const FIELDS: [Field; 15] = [
    field!("observation", Obs, F32, observation),
    field!("pixels", Pixels, pixels),
    Field {
        key: "action",
        dtype: ColumnType::I64,
        per_step: PerStep::Action,
        get: |c| {
            Some(match &c.action {
                ActionColumn::Discrete(v) => Column::I64(v),
                ActionColumn::Continuous(v) => Column::F32(v),
            })
        },
        get_mut: |c| {
            Some(match &mut c.action {
                ActionColumn::Discrete(v) => ColumnMut::I64(v),
                ActionColumn::Continuous(v) => ColumnMut::F32(v),
            })
        },
    },
    field!("sample_log_prob", Scalar, F32, sample_log_prob),
    field!("state_value", Scalar, F32, state_value),
    field!("is_init", Scalar, U8, is_init),
    field!("rs_h", State, F32, rs_h),
    Field {
        key: "rs_c",
        dtype: ColumnType::F32,
        per_step: PerStep::CellState,
        get: |c| c.rs_c.as_deref().map(Column::F32),
        get_mut: |c| c.rs_c.as_deref_mut().map(ColumnMut::F32),
    },
    field!("next.observation", Obs, F32, next_observation),
    field!("next.pixels", Pixels, next_pixels),
    field!("next.reward", Scalar, F32, next_reward),
    field!("next.terminated", Scalar, U8, next_terminated),
    field!("next.truncated", Scalar, U8, next_truncated),
    field!("next.done", Scalar, U8, next_done),
    field!("collector.traj_ids", Scalar, I64, traj_ids),
];

/// A column of a chunk.
pub(super) enum Column<'a> {
    F32(&'a [f32]),
    I64(&'a [i64]),
    U8(&'a [u8]),
}

/// A column of a chunk to decode into.
pub(super) enum ColumnMut<'a> {
    F32(&'a mut [f32]),
    I64(&'a mut [i64]),
    U8(&'a mut [u8]),
}

impl Column<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Column::F32(v) => v.len(),
            Column::I64(v) => v.len(),
            Column::U8(v) => v.len(),
        }
    }

    pub(super) fn dtype(&self) -> ColumnType {
        match self {
            Column::F32(..) => ColumnType::F32,
            Column::I64(..) => ColumnType::I64,
            Column::U8(..) => ColumnType::U8,
        }
    }

    pub(super) fn write_le(&self, out: &mut Vec<u8>) {
        match self {
            Column::F32(v) => out.extend(v.iter().flat_map(|x| x.to_le_bytes())),
            Column::I64(v) => out.extend(v.iter().flat_map(|x| x.to_le_bytes())),
            Column::U8(v) => out.extend_from_slice(v),
        }
    }
}

impl ColumnMut<'_> {
    /// Fills the column from its little-endian bytes (exactly its length).
    pub(super) fn read_le(self, bytes: &[u8]) {
        match self {
            ColumnMut::F32(v) => {
                for (x, b) in v.iter_mut().zip(bytes.chunks_exact(4)) {
                    *x = f32::from_le_bytes(b.try_into().expect("4 bytes"));
                }
            }
            ColumnMut::I64(v) => {
                for (x, b) in v.iter_mut().zip(bytes.chunks_exact(8)) {
                    *x = i64::from_le_bytes(b.try_into().expect("8 bytes"));
                }
            }
            ColumnMut::U8(v) => v.copy_from_slice(bytes),
        }
    }
}

//! [`Mat`]: the fused kernels' read-only matrix view of a slice (rows, columns and their
//! strides), what the GEMMs take as operands.

/// A read-only `[rows, cols]` matrix inside a slice: element `(i, j)` at `i * rs + j * cs`.
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// Row-major `[rows, cols]` starting at `data[0]`.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols)
    }

    /// Row-major with a row stride (a column block of a wider matrix).
    pub fn strided(data: &'a [f32], rows: usize, cols: usize, rs: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    /// The transpose (a view, no copy).
    pub fn t(self) -> Self {
        Self {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }
}

//! The products around the CubeCL kernels, on burn's tensors: a layer's input projection and
//! `dx` ([`matmul`], at the call's precision), its weight gradients (split over `B*T`:
//! [`weight_grad`]) and its bias gradients ([`column_sum`]).

use burn::tensor::Tensor;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};

use super::{kernel, prim, wrap, Cube};

/// `a x b` at the call's precision. `ieee` runs cubek's unit (register) matmul: burn's own
/// matmul stages `f32` operands as `tf32` on any device with tensor cores (cubek-matmul 0.2,
/// `adjust_dtypes`), so on an H100 every product of the layer would round to 10 bits of
/// mantissa. `tf32` and `bf16` keep burn's matmul (tensor cores where the device has them).
pub(super) fn matmul<R: CubeRuntime, BT: BoolElement, const D: usize>(
    a: Tensor<Cube<R, BT>, D>,
    b: Tensor<Cube<R, BT>, D>,
    precision: u32,
) -> Tensor<Cube<R, BT>, D> {
    if precision != kernel::IEEE {
        return a.matmul(b);
    }
    use burn::tensor::DType;
    use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems};
    use cubek::matmul::launch::{launch_ref, Strategy};
    use cubek::matmul::routines::simple_unit::SimpleUnitSelectionArgs;
    use cubek::matmul::routines::{BlueprintStrategy, TileSizeSelection};
    use cubek::std::InputBinding;
    // Transposed operands stay views: cubek reads either layout (burn's matmul passes them
    // the same way), and the naive fallback makes its own copy where it needs one.
    let (a, b) = (a.into_primitive().tensor(), b.into_primitive().tensor());
    let out = burn_cubecl::kernel::matmul::init_matmul_output(&a, &b, DType::F32);
    let launch = |strategy: &Strategy| {
        let mut dtypes = MatmulElems::from_globals(&MatmulGlobalElems {
            lhs: a.dtype.into(),
            rhs: b.dtype.into(),
            out: out.dtype.into(),
        });
        launch_ref(
            strategy,
            &out.client,
            InputBinding::new(a.clone().binding(), a.dtype.into()),
            InputBinding::new(b.clone().binding(), b.dtype.into()),
            out.clone().binding(),
            &mut dtypes,
        )
    };
    let unit = Strategy::SimpleUnit(BlueprintStrategy::Inferred(SimpleUnitSelectionArgs {
        tile_size: TileSizeSelection::MaxTileSize,
    }));
    // The naive kernel takes any shape the tiled one refuses (both multiply in f32).
    if let Err(unit_err) = launch(&unit) {
        launch(&Strategy::Naive).unwrap_or_else(|naive_err| {
            panic!("no f32 matmul launches: unit {unit_err:?}, naive {naive_err:?}")
        });
    }
    wrap::<R, BT, D>(out)
}

/// Rows of `B*T`, at least, per part of a split weight gradient ([`weight_grad`]).
const SPLIT_ROWS: usize = 1024;
/// Parts of a split weight gradient, at most.
const MAX_SPLITS: usize = 32;

/// `aᵀ b` for `a` `[n, p]` and `b` `[n, q]`: a layer's weight gradient, whose `n = B*T` runs to
/// hundreds of thousands over an output of a few hundred rows and columns. One matmul over all
/// of `n` gives the device a few dozen output tiles, each a loop over `n`, and leaves most of it
/// idle. So `n` is split into parts (split-K): up to [`MAX_SPLITS`] of at least [`SPLIT_ROWS`]
/// rows, a divisor of `n`, multiplied as one batched matmul and summed. `RECUR_CUBE_SPLIT_K`
/// sets the number of parts instead (1: no split), for benchmarks.
pub(super) fn weight_grad<R: CubeRuntime, BT: BoolElement>(
    a: Tensor<Cube<R, BT>, 2>,
    b: Tensor<Cube<R, BT>, 2>,
    precision: u32,
) -> CubeTensor<R> {
    let ([n, p], q) = (a.dims(), b.dims()[1]);
    let wanted = match std::env::var("RECUR_CUBE_SPLIT_K") {
        Ok(v) => match v.parse::<usize>() {
            Ok(parts) if parts > 0 => parts,
            _ => panic!("RECUR_CUBE_SPLIT_K = {v:?}: expected a number of parts, at least 1"),
        },
        Err(_) => MAX_SPLITS.min(n / SPLIT_ROWS),
    };
    let parts = divisor_at_most(n, wanted.min(n));
    if parts == 1 {
        return prim(matmul(a.transpose(), b, precision));
    }
    let a = a.reshape([parts, n / parts, p]).swap_dims(1, 2);
    let b = b.reshape([parts, n / parts, q]);
    prim(matmul(a, b, precision).sum_dim(0).reshape([p, q]))
}

/// The largest divisor of `n` that is at most `k` (1 at the least): how many equal parts of
/// `n` rows [`weight_grad`] and [`column_sum`] use.
fn divisor_at_most(n: usize, k: usize) -> usize {
    (1..=k.max(1))
        .rev()
        .find(|&d| n.is_multiple_of(d))
        .unwrap_or(1)
}

/// The column sums of `t` `[n, q]`: a layer's bias gradient, summed over `n = B*T` rows. burn's
/// `sum_dim(0)` over all of `n` runs one loop of `n` steps per column: 32 ms of an LSTM's
/// 112 ms fwd+bwd at B 2048, T 128 on an H100, per bias. Reshaped to `[parts, n / parts, q]`
/// (`parts` the largest divisor of `n` up to `√n`), the first sum has `parts * q` loops of
/// `n / parts` steps and the second `q` loops of `parts`.
pub(super) fn column_sum<R: CubeRuntime, BT: BoolElement>(
    t: Tensor<Cube<R, BT>, 2>,
) -> CubeTensor<R> {
    let [n, q] = t.dims();
    let parts = divisor_at_most(n, n.isqrt());
    let t = t.reshape([parts, n / parts, q]).sum_dim(1);
    prim(t.sum_dim(0).reshape([q]))
}

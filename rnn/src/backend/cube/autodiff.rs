//! One CubeCL fused layer as a node of burn's autodiff graph: the forward launch, and a
//! backward that relaunches the kernels in reverse (and the forward first, under
//! `recompute = "full"`), then the products for `dx`, the weights and the biases.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};

use super::matmul::{column_sum, matmul, weight_grad};
use super::{forward, kernel, launch_of, prim, rounded, wrap, Cube, How, Inputs};
use crate::backend::fused::Call;
use crate::{CellKind, Recompute};

/// What the backward of one layer call needs.
#[derive(Clone, Debug)]
struct LayerState<R: CubeRuntime> {
    how: How,
    inputs: Inputs<R>,
    /// The forward's output `[K, B, T, H]`.
    out: CubeTensor<R>,
    /// The saved gates (`recompute = "none"`).
    saved: Option<CubeTensor<R>>,
}

/// The backward step of one CubeCL fused layer. Parents: `x`, `h0`, `c0`, `w_ih`, `w_hh`,
/// `b_ih`, `b_hh` (absent ones are untracked placeholders).
#[derive(Debug)]
struct CubeLayerBackward;

impl<R: CubeRuntime, BT: BoolElement> Backward<Cube<R, BT>, 7> for CubeLayerBackward {
    type State = LayerState<R>;

    fn backward(self, ops: Ops<Self::State, 7>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [nx, nh, nc, nwi, nwh, nbi, nbh] = ops.parents;
        let dout = into_contiguous(grads.consume::<Cube<R, BT>>(&ops.node));
        let LayerState {
            how,
            inputs,
            out,
            saved,
        } = ops.state;
        let saved =
            saved.unwrap_or_else(|| forward::<R, BT>(how, &inputs, true).1.expect("kept gates"));
        let [rows, steps, input, hidden] = inputs.dims();
        let gh = how.cell.gates() * hidden;
        let lstm = how.cell.has_cell_state();
        let device = &out.device;
        let flat =
            |t: CubeTensor<R>, width: usize| wrap::<R, BT, 3>(t).reshape([rows * steps, width]);
        let empty = |shape: [usize; 3]| prim(Tensor::<Cube<R, BT>, 3>::empty(shape, device));
        let launch = launch_of(how, &out, rows, hidden);
        let (dg_ih, dh0) = (empty([rows, steps, gh]), empty([rows, steps, hidden]));
        // LSTM/GRU: `W_hh`'s gate gradients (a GRU's own, an LSTM's are `dg_ih`), the entering
        // states and `dc0`; minGRU has no recurrent weights.
        let mut recurrent = None;
        if how.cell == CellKind::MinGru {
            let (h0, start) = (&inputs.h0, &inputs.start);
            kernel::mingru_backward(launch, h0, start, &out, &saved, &dout, &dg_ih, &dh0);
        } else {
            let dummy = || prim(Tensor::<Cube<R, BT>, 1>::zeros([1], device));
            let (dg_hh, dc0) = if lstm {
                (dummy(), empty([rows, steps, hidden]))
            } else {
                (empty([rows, steps, gh]), dummy())
            };
            let h_in = empty([rows, steps, hidden]);
            let c0 = inputs.c0.clone().unwrap_or_else(dummy);
            let w_hh = inputs.w_hh.clone().expect("LSTM and GRU layers have W_hh");
            let w = rounded::<R, BT>(w_hh, how.precision);
            kernel::backward(
                launch,
                &w,
                &inputs.h0,
                &c0,
                &inputs.start,
                &out,
                &saved,
                &dout,
                &dg_ih,
                &dg_hh,
                &h_in,
                &dh0,
                &dc0,
            );
            recurrent = Some((dg_hh, h_in, dc0));
        }
        let dgi = flat(dg_ih, gh);
        let mut give = |node: Option<NodeId>, value: &dyn Fn() -> CubeTensor<R>| {
            if let Some(node) = node {
                grads.register::<Cube<R, BT>>(node, value());
            }
        };
        give(nx.map(|n| n.id), &|| {
            prim(
                matmul(
                    dgi.clone(),
                    wrap::<R, BT, 2>(inputs.w_ih.clone()),
                    how.precision,
                )
                .reshape([rows, steps, input]),
            )
        });
        give(nh.map(|n| n.id), &|| dh0.clone());
        give(nwi.map(|n| n.id), &|| {
            weight_grad(dgi.clone(), flat(inputs.x.clone(), input), how.precision)
        });
        give(nbi.map(|n| n.id), &|| column_sum(dgi.clone()));
        let Some((dg_hh, h_in, dc0)) = recurrent else {
            return;
        };
        let dgh = if lstm { dgi.clone() } else { flat(dg_hh, gh) };
        if lstm {
            give(nc.map(|n| n.id), &|| dc0.clone());
        }
        give(nwh.map(|n| n.id), &|| {
            weight_grad(dgh.clone(), flat(h_in.clone(), hidden), how.precision)
        });
        give(nbh.map(|n| n.id), &|| column_sum(dgh.clone()));
    }
}

/// One layer as a node of burn's autodiff graph on `Autodiff<Cube<R, BT>>`.
pub(super) fn autodiff_layer<R: CubeRuntime, BT: BoolElement>(
    how: How,
    start: CubeTensor<R>,
    call: Call<Autodiff<Cube<R, BT>>>,
) -> Tensor<Autodiff<Cube<R, BT>>, 4> {
    type AdTensor<R, BT> = burn::tensor::ops::FloatTensor<Autodiff<Cube<R, BT>>>;
    fn ad<R: CubeRuntime, BT: BoolElement, const D: usize>(
        t: Tensor<Autodiff<Cube<R, BT>>, D>,
    ) -> AdTensor<R, BT> {
        t.into_primitive().tensor()
    }
    let device = call.x.device();
    let placeholder =
        || AdTensor::<R, BT>::new(prim(Tensor::<Cube<R, BT>, 1>::zeros([1], &device)));
    let x = ad(call.x);
    let h0 = ad(call.h0);
    let c0 = call.c0.map(ad);
    let w_ih = ad(call.w_ih);
    let w_hh = call.w_hh.map(ad);
    let b_ih = call.b_ih.map(ad);
    let b_hh = call.b_hh.map(ad);
    let node = |t: &Option<AdTensor<R, BT>>| t.clone().unwrap_or_else(placeholder).node;
    let nodes = [
        x.node.clone(),
        h0.node.clone(),
        node(&c0),
        w_ih.node.clone(),
        node(&w_hh),
        node(&b_ih),
        node(&b_hh),
    ];
    let contiguous = |t: &AdTensor<R, BT>| into_contiguous(t.primitive.clone());
    let inputs = Inputs {
        x: contiguous(&x),
        h0: contiguous(&h0),
        c0: c0.as_ref().map(contiguous),
        w_ih: contiguous(&w_ih),
        w_hh: w_hh.as_ref().map(contiguous),
        b_ih: b_ih.as_ref().map(contiguous),
        b_hh: b_hh.as_ref().map(contiguous),
        start: into_contiguous(start),
    };
    let prepared = <CubeLayerBackward as Backward<Cube<R, BT>, 7>>::prepare::<NoCheckpointing>(
        CubeLayerBackward,
        nodes,
    );
    let output = match prepared.compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let keep = how.recompute == Recompute::None;
            let (out, saved) = forward::<R, BT>(how, &inputs, keep);
            let state = LayerState {
                how,
                inputs,
                out: out.clone(),
                saved,
            };
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward::<R, BT>(how, &inputs, false).0),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}

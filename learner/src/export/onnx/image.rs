//! One image's encoder as ONNX ops (split from the step graph's module for length).

use common::policy::image::ImageSpec;
use recur_rnn::encoder::EncoderLayer;

use super::{gemm, init, int_attr, ints_attr, DataType, Graph, StepModel};
use crate::export::params::cnn_prefix;

/// Image `k`'s encoder (`common::policy::image::ImageEncoder`) on the pixels `px` `[B, P]`
/// (already f32): its bytes cut out, `[B, H, W, C]` -> NCHW, scaled, the layers, flattened in
/// CHW order, the linear layer and ReLU -> `[B, features]`.
pub(super) fn image_encoder(
    g: &mut Graph,
    m: &StepModel,
    k: usize,
    spec: &ImageSpec,
    px: &str,
) -> String {
    let [h, w, c] = spec.part.shape;
    let prefix = cnn_prefix(k);
    let at = spec.offset as i64;
    let starts = g.i64_tensor(&format!("const.{prefix}.start"), &[1], &[at]);
    let ends = g.i64_tensor(
        &format!("const.{prefix}.end"),
        &[1],
        &[at + (h * w * c) as i64],
    );
    let axis_one = g.i64_tensor("const.axis_1", &[1], &[1]);
    let bytes = g.op("Slice", &[px, &starts, &ends, &axis_one]);
    let shape = [-1, h as i64, w as i64, c as i64];
    let shape = g.i64_tensor(&format!("const.{prefix}.hwc"), &[4], &shape);
    let mut hwc = g.op("Reshape", &[&bytes, &shape]);
    if let Some(codes) = &spec.config.onehot {
        // Channel k's codes as their planes: Equal against 0..n_k (broadcast over a trailing
        // axis of 1), Cast to float, the channels' planes concatenated in order.
        let mut planes = Vec::with_capacity(codes.len());
        let axis = g.i64_tensor(&format!("const.{prefix}.axis_3"), &[1], &[3]);
        for (k, &n) in codes.iter().enumerate() {
            let from = g.i64_tensor(
                &format!("const.{prefix}.onehot.{k}.start"),
                &[1],
                &[k as i64],
            );
            let to = g.i64_tensor(
                &format!("const.{prefix}.onehot.{k}.end"),
                &[1],
                &[k as i64 + 1],
            );
            let channel = g.op("Slice", &[&hwc, &from, &to, &axis]);
            let values: Vec<f32> = (0..n).map(|v| v as f32).collect();
            let codes = g.f32_tensor(&format!("const.{prefix}.onehot.{k}.codes"), &[n], &values);
            let equal = g.op("Equal", &[&channel, &codes]);
            let to_float = vec![int_attr("to", DataType::Float as i64)];
            planes.push(g.op_attr("Cast", &[&equal], to_float));
        }
        let refs: Vec<&str> = planes.iter().map(String::as_str).collect();
        hwc = g.op_attr("Concat", &refs, vec![int_attr("axis", 3)]);
    }
    let nchw = g.op_attr("Transpose", &[&hwc], vec![ints_attr("perm", &[0, 3, 1, 2])]);
    let scale = g.scalar(&format!("const.{prefix}.scale"), spec.config.scale);
    let mut x = g.op("Mul", &[&nchw, &scale]);
    for (i, layer) in spec.config.layers.iter().enumerate() {
        x = match *layer {
            EncoderLayer::Conv {
                kernel,
                stride,
                padding,
                ..
            } => {
                let weight = init(g, m.tensors, &format!("{prefix}.convs.{i}.weight"));
                let bias = init(g, m.tensors, &format!("{prefix}.convs.{i}.bias"));
                let attrs = vec![
                    ints_attr("kernel_shape", &[kernel, kernel]),
                    ints_attr("strides", &[stride, stride]),
                    ints_attr("pads", &[padding; 4]),
                ];
                let y = g.op_attr("Conv", &[&x, &weight, &bias], attrs);
                g.op("Relu", &[&y])
            }
            EncoderLayer::Maxpool { kernel } => {
                let attrs = vec![
                    ints_attr("kernel_shape", &[kernel, kernel]),
                    ints_attr("strides", &[kernel, kernel]),
                ];
                g.op_attr("MaxPool", &[&x], attrs)
            }
        };
    }
    let flat = g.op_attr("Flatten", &[&x], vec![int_attr("axis", 1)]);
    let weight = init(g, m.tensors, &format!("{prefix}.linear.weight"));
    let bias = init(g, m.tensors, &format!("{prefix}.linear.bias"));
    let y = gemm(g, &flat, &weight, Some(&bias));
    g.op("Relu", &[&y])
}

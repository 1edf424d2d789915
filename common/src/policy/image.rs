//! The policy's convolutional encoder of one image, as a burn module: the model of record (weight
//! blobs, checkpoints, burn's update path, the critic). The actor runs the same equations on
//! the host with [`recur_rnn::encoder::Encoder`] (im2col into the fused SIMD GEMM), whose
//! parameters are copied from this module ([`ImageEncoder::torch_params`]).
//!
//! ```text
//! pixels [N, P] (0..=255 as f32) -> this image's bytes [N, H, W, C] -> x = f32 * scale, NCHW
//!   (with `onehot`: each channel's codes as their planes of 0 or 1, `sum(onehot)` channels)
//! for each layer: Conv2d(kernel, stride, zero padding) + ReLU, or MaxPool2d(kernel)
//! flatten in (C, H, W) order -> ReLU(x W + b)   [N, features]
//! ```
//!
//! torch's names for an encoder's parameters are `convs.{i}.weight` `[out, in, k, k]` and
//! `convs.{i}.bias` for the convolution at index `i` of the config's `layers`, then
//! `linear.weight` `[features, flat]` and `linear.bias` (burn keeps the linear weight
//! transposed, `[flat, features]`).

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use recur_rnn::encoder::{EncoderConfig, EncoderLayer, ImageShape};

use crate::envs::ImagePart;

/// What an [`ImageEncoder`] reads and how it is built (not a parameter).
#[derive(Clone, Debug)]
pub struct ImageSpec {
    /// The image's key and shape.
    pub part: ImagePart,
    /// Where its bytes start in a step's pixels lane.
    pub offset: usize,
    pub config: EncoderConfig,
}

impl ImageSpec {
    /// This image's bytes of every step of a pixels lane `[n, px]`: the lane itself where it
    /// holds this image alone, else gathered into `own`.
    pub fn bytes_in<'a>(&self, pixels: &'a [u8], px: usize, own: &'a mut Vec<u8>) -> &'a [u8] {
        let bytes = self.part.bytes();
        if bytes == px {
            return pixels;
        }
        own.clear();
        for row in pixels.chunks_exact(px) {
            own.extend_from_slice(&row[self.offset..self.offset + bytes]);
        }
        own
    }
}

/// `n` rows of every part side by side into `out`: part `k` is `[n, w_k]` (`w_k` may be 0),
/// `out` becomes `[n, sum of w_k]`. How the core's input is put together on the host: the
/// MLP's output, then each image's features.
pub fn concat_rows(parts: &[&[f32]], n: usize, out: &mut Vec<f32>) {
    let widths: Vec<usize> = parts.iter().map(|p| p.len() / n).collect();
    out.clear();
    out.reserve(n * widths.iter().sum::<usize>());
    for row in 0..n {
        for (part, &w) in parts.iter().zip(&widths) {
            out.extend_from_slice(&part[row * w..(row + 1) * w]);
        }
    }
}

/// One image's convolutional encoder (see the module doc).
#[derive(Module, Debug)]
pub struct ImageEncoder<B: Backend> {
    /// The convolutions, in the order of the config's layers (max-pools have no parameters).
    pub convs: Vec<Conv2d<B>>,
    pub linear: Linear<B>,
    #[module(skip)]
    spec: ImageSpec,
}

/// The image's shape as the encoder crate takes it.
pub fn image_shape(part: &ImagePart) -> ImageShape {
    let [h, w, c] = part.shape;
    ImageShape::new(h, w, c)
}

impl<B: Backend> ImageEncoder<B> {
    /// An encoder of `spec`'s image; the config is checked against its shape (an error names
    /// the field, its value and what was expected).
    pub fn new(spec: ImageSpec, device: &B::Device) -> Result<Self, String> {
        let plan = spec
            .config
            .plan(image_shape(&spec.part))
            .map_err(|e| format!("policy.encoder.cnn for image {:?}: {e}", spec.part.key))?;
        let mut convs = Vec::new();
        // The first convolution's channels: the image's, or its codes' planes.
        let mut channels = plan.stages[0].input.channels;
        for layer in &spec.config.layers {
            if let EncoderLayer::Conv {
                out_channels,
                kernel,
                stride,
                padding,
            } = *layer
            {
                let p = padding;
                convs.push(
                    Conv2dConfig::new([channels, out_channels], [kernel, kernel])
                        .with_stride([stride, stride])
                        .with_padding(PaddingConfig2d::Explicit(p, p, p, p))
                        .init(device),
                );
                channels = out_channels;
            }
        }
        let linear = LinearConfig::new(plan.flat, spec.config.features).init(device);
        Ok(ImageEncoder {
            convs,
            linear,
            spec,
        })
    }

    pub fn spec(&self) -> &ImageSpec {
        &self.spec
    }

    /// Output width.
    pub fn features(&self) -> usize {
        self.spec.config.features
    }

    /// `pixels` `[N, P]` (the whole pixels lane of `N` steps, byte values as `f32`) ->
    /// `[N, features]`.
    pub fn forward(&self, pixels: Tensor<B, 2>) -> Tensor<B, 2> {
        let [n, _] = pixels.dims();
        let [h, w, c] = self.spec.part.shape;
        let at = self.spec.offset;
        let x = pixels.narrow(1, at, h * w * c).reshape([n, h, w, c]);
        let x = match &self.spec.config.onehot {
            None => x,
            // Plane (k, v) is 1 where channel k holds code v (no plane for a code past the range).
            Some(codes) => Tensor::cat(
                (codes.iter().enumerate())
                    .flat_map(|(k, &count)| {
                        let channel = x.clone().narrow(3, k, 1);
                        (0..count).map(move |v| channel.clone().equal_elem(v as f32).float())
                    })
                    .collect(),
                3,
            ),
        };
        let mut x = x.permute([0, 3, 1, 2]).mul_scalar(self.spec.config.scale);
        let mut convs = self.convs.iter();
        for layer in &self.spec.config.layers {
            x = match *layer {
                EncoderLayer::Conv { .. } => {
                    let conv = convs.next().expect("one conv per conv layer");
                    burn::tensor::activation::relu(conv.forward(x))
                }
                EncoderLayer::Maxpool { kernel } => burn::tensor::module::max_pool2d(
                    x,
                    [kernel, kernel],
                    [kernel, kernel],
                    [0, 0],
                    [1, 1],
                    false,
                ),
            };
        }
        let [_, c2, h2, w2] = x.dims();
        burn::tensor::activation::relu(self.linear.forward(x.reshape([n, c2 * h2 * w2])))
    }

    /// `(torch name, torch shape, values)` of every parameter, in torch's `state_dict` order
    /// (the linear weight transposed to `[features, flat]`).
    pub fn torch_params(&self) -> Vec<(String, Vec<usize>, Vec<f32>)> {
        use crate::backend::to_vec as host;
        let mut out = Vec::new();
        let mut convs = self.convs.iter();
        for (i, layer) in self.spec.config.layers.iter().enumerate() {
            if let EncoderLayer::Conv { .. } = layer {
                let conv = convs.next().expect("one conv per conv layer");
                let w = conv.weight.val();
                out.push((format!("convs.{i}.weight"), w.dims().to_vec(), host(w)));
                let b = conv.bias.as_ref().expect("convs have biases").val();
                out.push((format!("convs.{i}.bias"), b.dims().to_vec(), host(b)));
            }
        }
        let w = self.linear.weight.val().transpose();
        out.push(("linear.weight".into(), w.dims().to_vec(), host(w)));
        let b = self.linear.bias.as_ref().expect("linear has a bias").val();
        out.push(("linear.bias".into(), b.dims().to_vec(), host(b)));
        out
    }
}

//! One-hot codes (`EncoderConfig::onehot`): the encoder over codes equals, bit for bit, the
//! same encoder without `onehot` over the planes written out as bytes of 0 and 1 (scale 1),
//! forward and every parameter's gradient. The plain encoder is the one the reference files
//! check against torch, so this carries that check over to one-hot inputs.

use recur_rnn::encoder::{Encoder, EncoderConfig, EncoderGrads, ImageShape, OneHot, Tape};

#[test]
fn codes_equal_their_planes_written_out() {
    let (h, w, codes) = (7, 7, vec![4usize, 3, 2]);
    let planes: usize = codes.iter().sum();
    let frames = 37; // more than one block, so the frames split across threads
    let onehot_config = EncoderConfig {
        onehot: Some(codes.clone()),
        ..EncoderConfig::minigrid()
    };
    let mut coded = Encoder::new(&onehot_config, ImageShape::new(h, w, codes.len()), 3).unwrap();
    let mut plain =
        Encoder::new(&EncoderConfig::minigrid(), ImageShape::new(h, w, planes), 9).unwrap();
    let params: Vec<(String, Vec<f32>)> = coded
        .params()
        .map(|(name, _, v)| (name.to_string(), v.to_vec()))
        .collect();
    for (name, v) in &params {
        plain.set_param(name, v).unwrap();
    }
    // Codes 0..=5 in every channel: some past their channel's range (they set no plane).
    let mut seed = 11u32;
    let obs: Vec<u8> = (0..frames * h * w * codes.len())
        .map(|_| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((seed >> 16) % 6) as u8
        })
        .collect();
    let table = OneHot::new(&codes);
    let mut expanded = vec![0.0f32; frames * h * w * planes];
    table.expand(&obs, &mut expanded);
    let bytes: Vec<u8> = expanded.iter().map(|&x| x as u8).collect();
    assert!(bytes.contains(&1) && bytes.contains(&0));

    let (mut t1, mut t2) = (Tape::default(), Tape::default());
    let f1 = coded.forward_train(&obs, frames, &mut t1).unwrap().to_vec();
    let f2 = plain
        .forward_train(&bytes, frames, &mut t2)
        .unwrap()
        .to_vec();
    assert_eq!(f1, f2, "features");
    assert_eq!(coded.forward(&obs, frames).unwrap(), &f2[..], "inference");
    let grad: Vec<f32> = (0..f1.len()).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    let (mut g1, mut g2) = (EncoderGrads::zeros(&coded), EncoderGrads::zeros(&plain));
    coded.backward(&t1, &grad, &mut g1).unwrap();
    plain.backward(&t2, &grad, &mut g2).unwrap();
    for ((n1, v1), (n2, v2)) in g1.iter().zip(g2.iter()) {
        assert_eq!(n1, n2);
        assert!(v1.iter().any(|&g| g != 0.0), "{n1}: gradients to compare");
        assert_eq!(v1, v2, "gradient of {n1}");
    }
    // The first convolution takes the planes as its channels.
    assert_eq!(coded.plan().stages[0].input, ImageShape::new(h, w, planes));
    assert_eq!(coded.plan().input, ImageShape::new(h, w, codes.len()));
}

// IREE 3.13 repro: with --iree-global-opt-data-tiling (the packed hint below) the four phase matmuls of a stride-2 one-channel conv dx, concatenated, come out wrong; without it they are right (tests/test_input_grad.py)
// lmc: llvm-cpu packed matmuls
module @model {
func.func @input_grad(%w: tensor<6x1x2x2xf32>, %x: tensor<1x1x4x6xf32>, %dy: tensor<1x6x2x3xf32>) -> (tensor<f32>, tensor<1x1x4x6xf32>, tensor<1x6x2x3xf32>) {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %dyh = stablehlo.transpose %dy, dims = [2, 0, 3, 1] : (tensor<1x6x2x3xf32>) -> tensor<2x1x3x6xf32>
  %rg = stablehlo.reshape %dyh : (tensor<2x1x3x6xf32>) -> tensor<2x1x3x1x1x6xf32>
  %w0 = stablehlo.slice %w [0:6, 0:1, 0:1, 0:1] : (tensor<6x1x2x2xf32>) -> tensor<6x1x1x1xf32>
  %w0r = stablehlo.reshape %w0 : (tensor<6x1x1x1xf32>) -> tensor<1x1x6x1xf32>
  %m0 = stablehlo.dot_general %rg, %w0r, batching_dims = [4] x [0], contracting_dims = [3, 5] x [1, 2] : (tensor<2x1x3x1x1x6xf32>, tensor<1x1x6x1xf32>) -> tensor<1x2x1x3x1xf32>
  %w1 = stablehlo.slice %w [0:6, 0:1, 0:1, 1:2] : (tensor<6x1x2x2xf32>) -> tensor<6x1x1x1xf32>
  %w1r = stablehlo.reshape %w1 : (tensor<6x1x1x1xf32>) -> tensor<1x1x6x1xf32>
  %m1 = stablehlo.dot_general %rg, %w1r, batching_dims = [4] x [0], contracting_dims = [3, 5] x [1, 2] : (tensor<2x1x3x1x1x6xf32>, tensor<1x1x6x1xf32>) -> tensor<1x2x1x3x1xf32>
  %w2 = stablehlo.slice %w [0:6, 0:1, 1:2, 0:1] : (tensor<6x1x2x2xf32>) -> tensor<6x1x1x1xf32>
  %w2r = stablehlo.reshape %w2 : (tensor<6x1x1x1xf32>) -> tensor<1x1x6x1xf32>
  %m2 = stablehlo.dot_general %rg, %w2r, batching_dims = [4] x [0], contracting_dims = [3, 5] x [1, 2] : (tensor<2x1x3x1x1x6xf32>, tensor<1x1x6x1xf32>) -> tensor<1x2x1x3x1xf32>
  %w3 = stablehlo.slice %w [0:6, 0:1, 1:2, 1:2] : (tensor<6x1x2x2xf32>) -> tensor<6x1x1x1xf32>
  %w3r = stablehlo.reshape %w3 : (tensor<6x1x1x1xf32>) -> tensor<1x1x6x1xf32>
  %m3 = stablehlo.dot_general %rg, %w3r, batching_dims = [4] x [0], contracting_dims = [3, 5] x [1, 2] : (tensor<2x1x3x1x1x6xf32>, tensor<1x1x6x1xf32>) -> tensor<1x2x1x3x1xf32>
  %z0 = stablehlo.reshape %m0 : (tensor<1x2x1x3x1xf32>) -> tensor<1x2x1x1x3x1x1xf32>
  %z1 = stablehlo.reshape %m1 : (tensor<1x2x1x3x1xf32>) -> tensor<1x2x1x1x3x1x1xf32>
  %z2 = stablehlo.reshape %m2 : (tensor<1x2x1x3x1xf32>) -> tensor<1x2x1x1x3x1x1xf32>
  %z3 = stablehlo.reshape %m3 : (tensor<1x2x1x3x1xf32>) -> tensor<1x2x1x1x3x1x1xf32>
  %zr0 = stablehlo.concatenate %z0, %z1, dim = 5 : (tensor<1x2x1x1x3x1x1xf32>, tensor<1x2x1x1x3x1x1xf32>) -> tensor<1x2x1x1x3x2x1xf32>
  %zr1 = stablehlo.concatenate %z2, %z3, dim = 5 : (tensor<1x2x1x1x3x1x1xf32>, tensor<1x2x1x1x3x1x1xf32>) -> tensor<1x2x1x1x3x2x1xf32>
  %zs = stablehlo.concatenate %zr0, %zr1, dim = 2 : (tensor<1x2x1x1x3x2x1xf32>, tensor<1x2x1x1x3x2x1xf32>) -> tensor<1x2x2x1x3x2x1xf32>
  %dx = stablehlo.reshape %zs : (tensor<1x2x2x1x3x2x1xf32>) -> tensor<1x1x4x6xf32>
  %zz = stablehlo.constant dense<0.0> : tensor<f32>
  return %zz, %dx, %dy : tensor<f32>, tensor<1x1x4x6xf32>, tensor<1x6x2x3xf32>
}
}

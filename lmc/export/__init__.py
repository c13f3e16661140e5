"""The trained net leaves lmc, or published weights come in: `lmc export` (safetensors, ONNX, a
standalone IREE package) and `lmc import` (torchvision / timm state dicts → an lmc checkpoint).
docs/export.md is the user's side of it."""

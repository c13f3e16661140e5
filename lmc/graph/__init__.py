"""Stage 2, infer: NetSpec → TypedNet (a graph of primitives with every type known), its
initial tensors, and the physical-layout pass the lowering walks."""

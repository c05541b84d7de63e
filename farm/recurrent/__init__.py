"""The seed's recurrent-attention scaling sweep: the op-by-op baseline and the fused
kernel (`paths`), the sweep over cases (`sweep`) and its report (`report`)."""

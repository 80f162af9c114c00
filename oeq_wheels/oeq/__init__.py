"""Binary openequivariance wheels: OEq's stable-ABI extension, one build per CUDA line (stable, wheel, gate)."""

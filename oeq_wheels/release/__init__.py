"""The release's steps after the build: what release.yml takes from the pins (plan), the publish gate (publish),
the per-CUDA index site (site), and the cross-built aarch64 wheels compared with the native build (compare)."""

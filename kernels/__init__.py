"""kvtune: kernels."""

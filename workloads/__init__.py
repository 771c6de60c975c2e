"""kvtune: workloads."""

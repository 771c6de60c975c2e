"""kvtune: harness."""

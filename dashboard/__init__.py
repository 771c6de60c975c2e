"""kvtune: dashboard."""

"""kvtune: studies."""

"""Stand-in for NeMo-RL (main of 2026-08-22): only what lens_rl weaves and the loop shape around it."""

__version__ = "0.6.0"

"""Stand-in for SkyRL 0.3.0: only what lens_rl weaves and the loop shape around it."""

__version__ = "0.3.0"

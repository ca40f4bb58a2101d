"""Stand-in for OpenRLHF 0.11.0: only what lens_rl weaves and the loop shape around it."""

__version__ = "0.11.0"

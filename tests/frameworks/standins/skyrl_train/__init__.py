"""Stand-in for skyrl_train 0.3.1 (SkyRL's earlier package): its ``Timer`` only."""

__version__ = "0.3.1"

from skyrl.train.utils.utils import Timer

__all__ = ["Timer"]

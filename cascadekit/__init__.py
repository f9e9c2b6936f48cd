"""cascadekit: a course kit for reasoning-model post-training."""
__version__ = "0.1.0"

"""Training stages: pretraining and mid-training here; SFT, reward models and GRPO beside them."""

"""loadertop inside the training frameworks: a Lightning Callback (`loadertop.integrations.lightning`), a Hugging
Face TrainerCallback and Trainer mixin (`loadertop.integrations.huggingface`), and Accelerate's prepared loaders
(`loadertop.integrations.accelerate`). Each module imports its framework; this package imports none, and
loadertop's core imports none of them. They reach the training job's side only through its public entries:
`loadertop.watch` and `loadertop.tune` (loaders.py).
"""

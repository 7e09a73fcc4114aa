"""The fine-tune loop: distil traces into LoRA adapters, and run them with provider: local."""

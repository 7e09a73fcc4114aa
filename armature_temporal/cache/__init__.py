"""The LLM stage cache: exact (a hash of the call) and semantic (a nearest task above a
threshold tuned for precision)."""

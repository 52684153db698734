"""A stand-in for llama-cpp-python in tests: only its server module, which listens as told."""

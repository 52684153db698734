"""The package version (one place; pyproject.toml and Cargo.toml carry the same)."""

__version__ = "0.1.0"

"""enginespec's own version (one place; pyproject.toml and Cargo.toml carry the same). An engine's
versions are another thing: ``lifecycle/probing.py`` reads what is installed, ``definition/specifiers.py``
what a user asks for."""

__version__ = "0.1.0"

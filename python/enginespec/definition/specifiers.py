"""Requested versions: the one place a version or specifier from a user is read (PEP 440)."""

from __future__ import annotations

from enginespec.errors import InstallOptionsError


def requested_specifier(version: str | None) -> str:
    """The specifier for a requested version: ``""`` for ``None`` (the newest), ``==1.0`` for a
    version, the normalised specifier set for ``>=0.10,<0.12``. Anything else, the empty string
    included (an unset ``$VERSION`` in a script), is refused before anything runs."""
    # packaging is imported here, not at module level, to keep `import enginespec` light.
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    if version is None:
        return ""
    text = version.strip()
    if text:
        try:
            return f"=={Version(text)}"
        except InvalidVersion:
            pass
        try:
            return str(SpecifierSet(text))
        except InvalidSpecifier:
            pass
    raise InstallOptionsError(f"version: {version!r} is not a PEP 440 version or specifier")


def satisfies(installed: str, version: str | None) -> bool:
    """Whether an installed version meets a request (pre-releases count when asked for)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    specifier = requested_specifier(version)
    if not specifier:
        return True
    try:
        return SpecifierSet(specifier).contains(Version(installed), prereleases=True)
    except InvalidVersion:
        # A build string such as llama.cpp's `b4589` is no PEP 440 version: only an exact match.
        return specifier == f"=={installed}"

"""Fitting a table of literal strings into a terminal's width without splitting any cell: long
values are shortened with an ellipsis where that loses the least (the middle of a path), columns
empty in every row are left out, and optional columns go before any cell would wrap. A column is
declared once: its header, how its cell is made from a row, and its width rule."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

ELLIPSIS = "…"
#: spaces between two columns.
GAP = 2
EMPTY = "-"
#: what a column's cells are made from (a table's row).
Row = TypeVar("Row")


@dataclass(frozen=True)
class Column(Generic[Row]):
    header: str
    #: the cell of a row under this header (its text, before it is made literal).
    cell: Callable[[Row], str]
    #: how a value may be shortened: never, in the middle (paths, URLs), or at the end.
    #: ``host``: an address keeps only its ``:PORT`` (``127.0.0.1:8000`` -> ``:8000``), spent first.
    shorten: Literal["never", "middle", "end", "host"] = "never"
    #: fewest terminal cells a shortened value keeps.
    minimum: int = 8
    #: cells kept before optional columns are left out (a path stays readable).
    comfortable: int = 8
    #: left out, in order of ``drop`` (lowest first), when the table does not fit; 0: never.
    drop: int = 0
    #: kept whole while a column whose ``drop`` is at most this is still shown: those go first.
    whole_over: int = 0
    #: left out only when the table does not fit even with every value at its ``minimum``.
    last_resort: bool = False


def cell_len(text: str) -> int:
    """Terminal cells ``text`` takes (wide characters two, combining marks none), as rich
    counts them; rich is imported on the first table drawn, not with the command (``ps`` with
    nothing to show, ``--version``: rich.cells takes 12 ms to import)."""
    from rich.cells import cell_len as rich_cell_len

    return rich_cell_len(text)


def shorten(value: str, width: int, where: Literal["never", "middle", "end", "host"]) -> str:
    """``value`` cut to ``width`` terminal cells with an ellipsis (``/models/…/model.gguf``), or
    an address to its ``:PORT``."""
    if cell_len(value) <= width or where == "never" or width < 2:
        return value
    if where == "host":
        port = value[value.rfind(":") :]
        if port[1:].isdigit() and cell_len(port) <= width:
            return port
        where = "end"
    if where == "middle" and "/" in value:
        # The last path component names the thing: keep it whole when it fits.
        name = value[value.rindex("/") :]
        head = width - 1 - cell_len(name)
        if head >= 0 and cell_len(value[:head] + ELLIPSIS + name) <= width:
            return value[:head] + ELLIPSIS + name
    keep = width - 1
    while keep > 0:
        if where == "end":
            candidate = value[:keep] + ELLIPSIS
        else:
            tail = keep // 2 + keep % 2  # the end says most: keep more of it
            candidate = value[: keep - tail] + ELLIPSIS + value[len(value) - tail :]
        if cell_len(candidate) <= width:
            return candidate
        keep -= 1
    return ELLIPSIS


def fit(
    columns: Sequence[Column[Any]], rows: Sequence[Sequence[str]], width: int | None
) -> tuple[list[str], list[list[str]]]:
    """The headers and rows to show: columns empty (``-``) in every row left out; with a ``width``,
    shortened and thinned until every line fits in it where possible. Names are shortened first,
    then optional columns go, and only then are paths cut below a comfortable length."""
    keep = [i for i in range(len(columns)) if any(row[i] != EMPTY for row in rows)]
    while True:
        natural = {i: max(cell_len(columns[i].header), *(cell_len(row[i]) for row in rows)) for i in keep}
        if width is None or _total(natural) <= width:
            return _render(columns, rows, keep, natural)
        droppable = [i for i in keep if columns[i].drop]
        cheapest = min((columns[i].drop for i in droppable), default=0)
        first = min(droppable, key=lambda i: columns[i].drop, default=None)
        comfortable: dict[int, int] = {}
        for i in keep:
            if droppable and cheapest <= columns[i].whole_over:
                comfortable[i] = natural[i]
            elif i == first:
                # cut below its comfortable width only as the next to go: cheaper columns go first
                comfortable[i] = columns[i].minimum
            else:
                comfortable[i] = columns[i].comfortable
        widths = _shrink(columns, natural, width, comfortable)
        minimum = _shrink(columns, natural, width, {i: columns[i].minimum for i in keep})
        if (
            _total(widths) <= width
            or first is None
            or (columns[first].last_resort and _total(minimum) <= width)
        ):
            return _render(columns, rows, keep, minimum)
        keep.remove(first)


def _shrink(
    columns: Sequence[Column[Any]], natural: dict[int, int], width: int, floors: dict[int, int]
) -> dict[int, int]:
    widths = dict(natural)
    excess = _total(widths) - width
    for where in ("end", "host", "middle"):
        for i in widths:
            column = columns[i]
            if column.shorten != where or excess <= 0:
                continue
            floor = max(floors[i], cell_len(column.header))
            cut = min(excess, widths[i] - floor)
            if cut > 0:
                widths[i] -= cut
                excess -= cut
    return widths


def _total(widths: dict[int, int]) -> int:
    return sum(widths.values()) + GAP * (len(widths) - 1)


def _render(
    columns: Sequence[Column[Any]], rows: Sequence[Sequence[str]], keep: list[int], widths: dict[int, int]
) -> tuple[list[str], list[list[str]]]:
    headers = [columns[i].header for i in keep]
    shown = [[shorten(row[i], widths[i], columns[i].shorten) for i in keep] for row in rows]
    return headers, shown


def lines(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The table as text lines, columns padded to their widest cell."""
    widths = [max(cell_len(h), *(cell_len(row[i]) for row in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = (cell + " " * (widths[i] - cell_len(cell)) for i, cell in enumerate(cells))
        return (" " * GAP).join(padded).rstrip()

    return [line(headers), *(line(row) for row in rows)]

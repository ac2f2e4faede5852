"""The tabs of a report page that Flyte 2 rendered, read back from its HTML.

``flyte.report.flush()`` replaces the action's one ``report.html`` with the flushing process's tabs.
The ``a0`` process flushes after rank 0's workers, so it must first read their tabs back
(:mod:`flyteplugins.rootcause.report`). This module finds those tabs in the rendered page. A tab's
HTML is the user's, so it is cut out exactly as written, nesting as a browser does. A page without
the expected layout reads as ``None``. ``docs/flyte2.md`` describes the layout it reads.
"""

from __future__ import annotations

from html.parser import HTMLParser

from flyteplugins.rootcause.upstream import REPORT_BODIES_ID, REPORT_TABS_ID

#: The ids of the template's tab bar and tab bodies (private to flyte: the seam lists and checks them).
NAV_ID = REPORT_TABS_ID
CONTAINER_ID = REPORT_BODIES_ID


def tabs_of_page(page: str) -> list[tuple[str, str]] | None:
    """The page's tabs as ``(name, html)`` in the page's order, or ``None`` if it is not a page that
    Flyte 2's report renders (its names and bodies do not pair up)."""
    reader = _TabReader(page)
    try:
        reader.feed(page)
        reader.close()
    except AssertionError:  # HTMLParser's way of refusing some malformed markup
        return None
    if not reader.container_closed or len(reader.names) != len(reader.bodies):
        return None
    return list(zip(reader.names, reader.bodies, strict=True))


class _TabReader(HTMLParser):
    """Collects the tab bar's names and the raw HTML of the container's top-level ``<div>``\\ s."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self._page = page
        self._line_starts = [0]
        for index, char in enumerate(page):
            if char == "\n":
                self._line_starts.append(index + 1)
        self.names: list[str] = []
        self.bodies: list[str] = []
        self.container_closed = False
        self._in_nav = False
        self._name: list[str] | None = None
        #: ``div`` nesting inside the container: ``None`` outside it, 0 between its tabs
        self._depth: int | None = None
        self._body_start = 0

    def _offset(self) -> int:
        """Where the tag being handled starts in the page."""
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.container_closed:
            return
        if tag == "ul" and ("id", NAV_ID) in attrs:
            self._in_nav = True
        elif tag == "li" and self._in_nav:
            self._name = []
        elif tag == "div" and self._depth is not None:
            self._depth += 1
            if self._depth == 1:
                self._body_start = self._offset() + len(self.get_starttag_text() or "")
        elif tag == "div" and ("id", CONTAINER_ID) in attrs:
            self._depth = 0

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # a browser ignores the slash of ``<div/>``: the div stays open, as here
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if self.container_closed:
            return
        if tag == "ul" and self._in_nav:
            self._in_nav = False
        elif tag == "li" and self._name is not None:
            self.names.append("".join(self._name))
            self._name = None
        elif tag == "div" and self._depth is not None:
            if self._depth == 0:
                self.container_closed = True
                return
            if self._depth == 1:
                self.bodies.append(self._page[self._body_start:self._offset()])
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._name is not None:
            self._name.append(data)

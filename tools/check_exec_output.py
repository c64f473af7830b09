"""Fail if a build-time (exec="on") block shows an empty output in the built site.

markdown-exec runs the book's ```python exec="on" ...``` blocks when the site is built
and shows what they print under them. It captures only the block's own `print` calls:
a block whose output is printed somewhere else (say, inside a module's function, to the
real stdout) renders an empty box, and the build still passes.

tools/mkdocs_hooks.py wraps each such block's HTML in
<div class="md-exec" data-source="above">, data-source being the block's `source`
option. This reads site/**/*.html, takes each block's output (what is in the wrapper
besides the source's code block) and reports the empty ones with their page, number
on the page, section and first source line. Exit 1 if any is empty, or if there is no
exec block at all (then the hook that marks them is not running).

    python tools/check_exec_output.py [site]
"""

import sys
from html.parser import HTMLParser
from pathlib import Path

HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}


class ExecBlocks(HTMLParser):
    """Each md-exec wrapper as a dict: source (where the source is shown), the
    heading above it, and parts: its text as (is_code_block, text) in page order."""

    def __init__(self):
        super().__init__()
        self.blocks: list[dict] = []
        self.depth = 0  # <div> nesting inside the current wrapper; 0: outside any
        self.pre: list[str] | None = None  # text of the <pre> being read
        self.heading, self.heading_text = "", None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div" and self.depth:
            self.depth += 1
        elif tag == "div" and "md-exec" in (attrs.get("class") or "").split():
            self.depth = 1
            source = attrs.get("data-source") or ""
            self.blocks.append({"source": source, "heading": self.heading, "parts": []})
        elif tag == "pre" and self.depth:
            self.pre = []
        elif tag in HEADINGS:
            self.heading_text = []

    def handle_endtag(self, tag):
        if tag == "div" and self.depth:
            self.depth -= 1
        elif tag == "pre" and self.pre is not None:
            self.blocks[-1]["parts"].append((True, "".join(self.pre)))
            self.pre = None
        elif tag in HEADINGS and self.heading_text is not None:
            self.heading = "".join(self.heading_text).replace("¶", "").strip()
            self.heading_text = None

    def handle_data(self, data):
        if self.pre is not None:
            self.pre.append(data)
        elif self.depth:
            self.blocks[-1]["parts"].append((False, data))
        if self.heading_text is not None:
            self.heading_text.append(data)


def split_block(block: dict) -> tuple[str, str]:
    """(source, output) of one block, by where its source is shown."""
    parts, where = block["parts"], block["source"]
    codes = [i for i, (is_code, _) in enumerate(parts) if is_code]
    if where == "":  # no source shown: everything is output
        source, output = [], parts
    elif where == "above" and codes:
        source, output = [parts[codes[0]]], parts[codes[0] + 1 :]
    elif where == "below" and codes:
        source, output = [parts[codes[-1]]], parts[: codes[-1]]
    else:
        raise ValueError(f"cannot tell output from source for source={where!r}")
    return "".join(t for _, t in source), "".join(t for _, t in output)


def empty_outputs(html: str, page: str = "page") -> tuple[int, list[str]]:
    """(number of exec blocks, one line for each block whose output is empty)."""
    parser = ExecBlocks()
    parser.feed(html)
    parser.close()
    problems = []
    for number, block in enumerate(parser.blocks, 1):
        source, output = split_block(block)
        if not output.strip():
            first = next((line for line in source.splitlines() if line.strip()), "")
            problems.append(
                f"{page}: exec block {number} (section {block['heading']!r}, "
                f"source {first.strip()!r}): empty output"
            )
    return len(parser.blocks), problems


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else "site")
    pages = sorted(site.rglob("*.html"))
    if not pages:
        print(f"check_exec_output: no HTML under {site}/; build the site first")
        return 1
    blocks, problems = 0, []
    for page in pages:
        count, empty = empty_outputs(page.read_text(encoding="utf-8"), str(page))
        blocks, problems = blocks + count, problems + empty
    for line in problems:
        print(line)
    print(
        f"check_exec_output: {blocks} exec blocks in {len(pages)} pages, "
        f"{len(problems)} with empty output"
    )
    if blocks == 0:
        print("no exec block found: is the md-exec marker in tools/mkdocs_hooks.py on?")
    return 1 if problems or blocks == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

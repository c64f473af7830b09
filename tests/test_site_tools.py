"""tools/check_exec_output.py, the md-exec marker in tools/mkdocs_hooks.py and the pure
parts of tools/site_check.py, on small synthetic inputs: each check can fail."""

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.book
pytest.importorskip("mkdocs")  # the hooks module imports it (absent on a GPU machine)

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


check = load("check_exec_output")
hooks = load("mkdocs_hooks")
site_check = load("site_check")

# What mkdocs builds for ```python exec="on" source="above" result="text"```, marked by
# the hook: the source's code block, then the output's.
SOURCE = (
    '<div class="highlight"><pre><span></span><code><span class="kn">from</span> '
    'demo <span class="kn">import</span> main\n\nmain()\n</code></pre></div>'
)


def page(output_html: str, where: str = "above") -> str:
    return (
        '<h2 id="running-it">Running it<a class="headerlink" href="#running-it">¶</a>'
        f'</h2>\n<div class="md-exec" data-source="{where}">\n{SOURCE}\n'
        f"{output_html}\n</div>\n<p>after</p>"
    )


EMPTY = '<div class="highlight"><pre><span></span><code>\n</code></pre></div>'
FULL = '<div class="highlight"><pre><span></span><code>2 kernel(s)\n</code></pre></div>'


def test_empty_output_is_reported_with_its_place():
    count, problems = check.empty_outputs(page(EMPTY), "index.html")
    assert count == 1
    assert problems == [
        "index.html: exec block 1 (section 'Running it', "
        "source 'from demo import main'): empty output"
    ]


def test_output_passes():
    assert check.empty_outputs(page(FULL)) == (1, [])
    # output rendered as markdown (no result="..."), not as a code block
    assert check.empty_outputs(page("<p>a <em>table</em></p>")) == (1, [])


def test_source_below_and_no_source():
    below = f'<div class="md-exec" data-source="below">{{}}{SOURCE}</div>'
    assert check.empty_outputs(below.format(FULL)) == (1, [])
    assert len(check.empty_outputs(below.format(EMPTY))[1]) == 1
    nothing = '<div class="md-exec" data-source="">\n</div>'  # no source, no output
    assert len(check.empty_outputs(nothing)[1]) == 1
    with pytest.raises(ValueError, match="tabbed-left"):
        check.empty_outputs(page(FULL, "tabbed-left"))


def test_unmarked_code_blocks_are_not_exec_blocks():
    assert check.empty_outputs(SOURCE + EMPTY) == (0, [])


def test_main_fails_on_empty_and_on_no_exec_block(tmp_path, capsys):
    (tmp_path / "index.html").write_text(page(FULL), encoding="utf-8")
    assert check.main([str(tmp_path)]) == 0
    (tmp_path / "ch").mkdir()
    (tmp_path / "ch" / "index.html").write_text(page(EMPTY), encoding="utf-8")
    assert check.main([str(tmp_path)]) == 1
    assert "ch/index.html: exec block 1" in capsys.readouterr().out
    (tmp_path / "index.html").write_text("<p>no exec</p>", encoding="utf-8")
    (tmp_path / "ch" / "index.html").write_text("<p>no exec</p>", encoding="utf-8")
    assert check.main([str(tmp_path)]) == 1  # the marker is missing
    assert check.main([str(tmp_path / "missing")]) == 1


def test_hook_marks_markdown_exec_fences_only():
    def formatter(source, language, css_class, options, md, **kwargs):
        return f"<pre>{source}</pre>"

    formatter.__module__ = "markdown_exec._internal.main"

    def mermaid(source, language, css_class, options, md, **kwargs):
        return "<pre class='mermaid'></pre>"

    class Config:
        mdx_configs = {
            "pymdownx.superfences": {
                "custom_fences": [{"format": formatter}, {"format": mermaid}]
            }
        }

    hooks.on_config(Config)
    fences = Config.mdx_configs["pymdownx.superfences"]["custom_fences"]
    html = fences[0]["format"]("x", "python", "python", {"source": "above"}, None)
    assert html == '<div class="md-exec" data-source="above">\n<pre>x</pre>\n</div>'
    assert fences[1]["format"] is mermaid


def event(session: str, method: str, **params) -> dict:
    return {"sessionId": session, "method": method, "params": params}


def test_site_check_findings():
    exception = {
        "text": "Uncaught",
        "exception": {"description": "ReferenceError: x\n"},
    }
    events = [
        event(
            "p", "Network.requestWillBeSent", request={"url": "http://127.0.0.1:8/a.js"}
        ),
        event("w", "Network.requestWillBeSent", request={"url": "https://unpkg.com/m"}),
        event("p", "Runtime.exceptionThrown", exceptionDetails=exception),
        event("p", "Runtime.consoleAPICalled", type="log", args=[{"value": "fine"}]),
        event(
            "tab", "Runtime.consoleAPICalled", type="error", args=[{"value": "other"}]
        ),
        event(
            "w",
            "Log.entryAdded",
            entry={"level": "error", "text": "Failed", "url": "u"},
        ),
    ]
    errors, requests = site_check.findings(events, {"p", "w"})
    assert errors == ["ReferenceError: x", "Failed u"]
    assert requests == ["https://unpkg.com/m"]
    assert site_check.findings(events[:1], {"p"}) == ([], [])


def test_site_check_counts_svgs_in_mermaid_shadow_roots():
    svg = {"nodeName": "svg"}
    drawn = {
        "nodeName": "DIV",
        "attributes": ["class", "mermaid"],
        "shadowRoots": [{"nodeName": "#document-fragment", "children": [svg]}],
    }
    raw = {
        "nodeName": "PRE",
        "attributes": ["class", "mermaid"],
        "children": [{"nodeName": "CODE"}],
    }
    other = {"nodeName": "DIV", "attributes": ["class", "x"], "children": [svg]}
    root = {"nodeName": "#document", "children": [drawn, raw, other]}
    assert site_check.mermaid_svgs(root) == 1
    assert site_check.mermaid_svgs({"nodeName": "#document", "children": [raw]}) == 0


def test_site_check_opens_every_page_with_a_diagram(tmp_path):
    (tmp_path / "index.md").write_text("# Preface\n\n```mermaid\nflowchart TB\n```\n")
    (tmp_path / "05_ir.md").write_text("```mermaid\na\n```\n\ntext\n\n  ```mermaid\nb\n```\n")
    (tmp_path / "06_lowering.md").write_text("```python\nx = '```mermaid'\n```\n")
    (tmp_path / "notes.txt").write_text("```mermaid\n")
    assert site_check.diagrams(str(tmp_path)) == [("05_ir/", 2), ("", 1)]
    real = dict(site_check.diagrams())
    assert real.get("", 0) >= 1  # the preface's pipeline

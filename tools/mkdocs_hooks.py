"""mkdocs hooks: publish the learner stubs exercises/ex*.py as site pages, and mark
the HTML of markdown-exec blocks so that tools/check_exec_output.py can find it.

docs_dir is chapters/, and mkdocs cannot use the repository root as docs_dir, so
the top-level stubs are added to the file collection here, as exercises/exNN_*.py,
before mkdocs-jupyter (which runs later) turns them into notebook pages. The
solutions (exercises/solutions/) are never published. `mkdocs serve` also watches
exercises/ and minductor/, whose changes alter pages.
"""

from html import escape
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File


def repo_root(config) -> Path:
    return Path(config["config_file_path"]).resolve().parent


@event_priority(100)  # before mkdocs-jupyter's on_files
def on_files(files, config):
    root = repo_root(config)
    for stub in sorted((root / "exercises").glob("ex*.py")):
        path = f"exercises/{stub.name}"
        if files.get_file_from_path(path) is None:
            files.append(
                File(path, str(root), config["site_dir"], config["use_directory_urls"])
            )
    return files


@event_priority(-100)  # after markdown-exec's on_config has added its fences
def on_config(config):
    """Wrap each markdown-exec block's HTML in <div class="md-exec" data-source="...">.

    markdown-exec renders a block's output as an ordinary code block, which nothing in
    the HTML tells apart from the others; the wrapper (data-source: the block's `source`
    option, which says where its source is shown) lets the checker find the outputs.
    """
    fences = config.mdx_configs.get("pymdownx.superfences", {}).get("custom_fences", [])
    for fence in fences:
        if fence["format"].__module__.startswith("markdown_exec"):
            fence["format"] = mark_exec(fence["format"])
    return config


def mark_exec(fmt):
    def marked(source, language, css_class, options, md, **kwargs):
        html = fmt(source, language, css_class, options, md, **kwargs)
        where = escape(options.get("source", ""))
        return f'<div class="md-exec" data-source="{where}">\n{html}\n</div>'

    return marked


def on_serve(server, config, builder):
    for name in ("exercises", "minductor"):
        if (repo_root(config) / name).is_dir():
            server.watch(str(repo_root(config) / name))
    return server

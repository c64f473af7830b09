"""mkdocs hooks: publish the learner stubs exercises/ex*.py as site pages.

docs_dir is chapters/, and mkdocs cannot use the repository root as docs_dir, so
the top-level stubs are added to the file collection here, as exercises/exNN_*.py,
before mkdocs-jupyter (which runs later) turns them into notebook pages. The
solutions (exercises/solutions/) are never published. `mkdocs serve` also watches
exercises/ and minductor/, whose changes alter pages.
"""

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


def on_serve(server, config, builder):
    for name in ("exercises", "minductor"):
        if (repo_root(config) / name).is_dir():
            server.watch(str(repo_root(config) / name))
    return server

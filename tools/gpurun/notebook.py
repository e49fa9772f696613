"""One notebook under nbclient (as nbmake runs it), saved after every cell, so that a notebook
stopped at its limit keeps what it did; and what an executed notebook says of its run (the cells
done, the failing cell, its first line, the error). The kernel keeps its own matplotlib backend
(ipykernel's inline one: figures are kept as PNG outputs), so ``MPLBACKEND`` is never set for it."""

from __future__ import annotations

import json
import re
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _cell_seconds(cell) -> float | None:
    from datetime import datetime

    ex = cell.get("metadata", {}).get("execution", {})
    start, end = ex.get("iopub.execute_input") or ex.get("shell.execute_reply.started"), ex.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return round((parse(end) - parse(start)).total_seconds(), 2)


def notebook_progress(nb, running: int | None = None, error: str | None = None) -> dict:
    """What a (partly) executed notebook says: cells done, the seconds of each, the cell that failed
    (``running``: its index among all cells) with its first line, and the error."""
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    times = [(i, _cell_seconds(c)) for i, c in code]
    done = [(i, s) for i, s in times if s is not None]
    out = {"cells_total": len(code), "cells_done": len(done),
           "cells_s": [{"index": i, "code_cell": n + 1, "seconds": s, "first_line": _first_line(nb.cells[i])}
                       for n, (i, s) in enumerate(times) if s is not None]}
    if running is not None and 0 <= running < len(nb.cells):
        number = next((n + 1 for n, (i, _) in enumerate(code) if i == running), None)
        out["cell"] = {"index": running, "code_cell": number, "first_line": _first_line(nb.cells[running])}
    if error:
        out["error"] = error
    return out


def _first_line(cell) -> str:
    lines = [line for line in "".join(cell.source).splitlines() if line.strip() and not line.startswith("#")]
    return (lines[0] if lines else "".join(cell.source).splitlines()[0] if cell.source else "")[:120]


def run_notebook(src: Path, executed: Path, result: Path, cell_timeout: int) -> int:
    """Executes ``src`` top to bottom (nbclient, as nbmake does, in the notebook's folder), writing
    the executed notebook and ``result`` (JSON: :func:`notebook_progress`) after every cell, so
    that a notebook stopped at its limit keeps what it did. Exit status 1 when a cell fails."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(src, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    executed.parent.mkdir(parents=True, exist_ok=True)

    def save(status: str, running: int | None = None, error: str | None = None, notebook: bool = True) -> None:
        if notebook:
            tmp = executed.with_name(f".{executed.name}.tmp")
            nbformat.write(nb, tmp)
            tmp.replace(executed)
        doc = {"name": src.stem, "status": status, **notebook_progress(nb, running, error)}
        result.with_name(f".{result.name}.tmp").write_text(json.dumps(doc, indent=1))
        result.with_name(f".{result.name}.tmp").replace(result)

    client = NotebookClient(nb, timeout=cell_timeout, allow_errors=False, record_timing=True,
                            kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"))
    # before a cell: which one runs (a notebook stopped at its limit names it); after: the outputs
    client.on_cell_execute = lambda cell, cell_index: save("running", cell_index, notebook=False)
    client.on_cell_executed = lambda cell, cell_index, execute_reply: save("running", cell_index)
    try:
        client.execute(cwd=str(src.parent))
    except (CellExecutionError, CellTimeoutError) as e:
        failing = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                        and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        if failing is None:  # a timeout: the first code cell without a reply
            failing = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                            and "shell.execute_reply" not in c.get("metadata", {}).get("execution", {})), None)
        save("failed", failing, ANSI.sub("", str(e))[-4000:])
        return 1
    save("passed")
    return 0


def outcome(executed: Path) -> dict:
    """What an executed notebook (nbmake's ``--overwrite``) says: :func:`notebook_progress`, with
    the first cell that shows an error and that error (its name and value).

    Example:
        >>> import nbformat, tempfile
        >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
        >>> nb.cells[0].outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError",
        ...                                                  evalue="division by zero", traceback=[])]
        >>> path = Path(tempfile.mkdtemp()) / "t.ipynb"; nbformat.write(nb, path)
        >>> doc = outcome(path); doc["cell"]["first_line"], doc["error"]
        ('1 / 0', 'ZeroDivisionError: division by zero')
    """
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    for i, c in enumerate(nb.cells):
        errors = [o for o in c.get("outputs", []) if o.get("output_type") == "error"] if c.cell_type == "code" else []
        if errors:
            return notebook_progress(nb, i, f"{errors[0].get('ename')}: {errors[0].get('evalue')}")
    return notebook_progress(nb)


def has_png(executed: Path) -> bool:
    """Whether an executed notebook carries a figure (an ``image/png`` output)."""
    doc = json.loads(executed.read_text())
    return any("image/png" in o.get("data", {}) for c in doc["cells"] for o in c.get("outputs", []))

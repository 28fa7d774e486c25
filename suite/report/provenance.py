"""What software and hardware a run's figures came from, in one line for the top of every page.

A figure read on a workload page or quality.html is only as good as the
driver, CUDA, PyTorch and cuDNN it was measured with; the index lists them in
its environment table, and every other page repeats them in one line
(``_provenance.html``) so no page names the GPU alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from ampsuite.analysis import AnyDocument, as_mapping, cudnn_version, provenance_line

__all__ = ["cudnn_version", "provenance_line", "provenance_lines"]


def provenance_lines(docs: Sequence[AnyDocument]) -> list[dict[str, str]]:
    """One entry per distinct environment of ``docs``, each with the runs it covers.

    Runs of one machine and software stack (a history) share one line rather
    than repeat it once per file.
    """
    lines: dict[str, list[str]] = {}
    for doc in docs:
        run_id = str(as_mapping(doc.get("run")).get("id") or "?")
        lines.setdefault(provenance_line(doc), []).append(run_id)
    return [{"line": line, "runs": ", ".join(runs)} for line, runs in lines.items()]

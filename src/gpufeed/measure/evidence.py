"""The evidence box of a lesson: its headline claims, and for each where the page's evidence comes from.

A learner reading a lesson on a machine without a GPU should know, claim by claim, what the page
measured in their own run, what comes from a GPU run of ours (which GPU, when, and whether it ran
today's code), what others published (who, on what hardware, with the link), and what nobody has
measured on a GPU yet. The claims are listed once, in the lesson registry
(:attr:`gpufeed.measure.lessons.Lesson.claims`); this module reads each one's sources:

* **measured here**: what the page measures in this run (:attr:`~gpufeed.measure.lessons.Claim.here`),
  on any machine, or only with CUDA;
* **our GPU reference**: the newest committed full-mode result that holds the claim
  (``results/<gpu>/<stem>.json``, :func:`gpufeed.measure.results.committed_files`), with its GPU and
  date, and whether it ran today's code (``references.json``'s hashes against this checkout,
  :func:`gpufeed.measure.references.staleness`);
* **published**: each figure of ``results/published.json`` the claim names;
* **not yet measured on a GPU**: a GPU claim with neither.

The box renders in the notebook (the setup cell, :func:`gpufeed.setup`) and on the site under
"Measured on" (``tools/book.py``). Torch-free.

Example:
    >>> from gpufeed.measure.lessons import Claim, lesson
    >>> [s.kind for s in sources(Claim("uint8 is 4x smaller.", here="the bytes"), "03", cuda=False)]
    ['measured here']
    >>> [s.kind for s in sources(Claim("x", gpu=True), "03", cuda=False)]
    ['not yet measured on a GPU']
    >>> print(box("06", cuda=False).splitlines()[0])
    **Evidence on this page**
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpufeed.measure import published, references, results
from gpufeed.measure.lessons import Claim, Lesson, lesson

MEASURED_HERE, OUR_GPU, PUBLISHED, NOT_YET = "measured here", "our GPU reference", "published", "not yet measured on a GPU"
#: A claim this page measures only with CUDA, read on a machine without.
ON_A_GPU = "measured here on a GPU only"


@dataclass(frozen=True)
class Source:
    """One source of evidence for a claim: its ``kind`` (one of the five above), what it says in
    words (``text``), the link where there is one, and, for our GPU reference, whether it ran today's
    code (``fresh``: True, False, or None where this copy cannot tell)."""

    kind: str
    text: str
    link: str | None = None
    fresh: bool | None = None


def gpu_reference(stem: str) -> tuple[Path, dict] | None:
    """The newest committed GPU result named ``stem`` (``results/<gpu>/<stem>.json``), as its path and
    document, or None."""
    found = results.committed_files(stem, results.has_gpu)
    return (found[0][0], found[0][2]) if found else None


def reference_freshness(path: Path, stem: str) -> tuple[bool | None, str]:
    """Whether the reference at ``path`` ran today's code: ``(fresh, why)`` from its folder's
    ``references.json`` (None where there is no entry, or no checkout to compare with)."""
    entry = references.load(path.parent).get(stem)
    if not entry:
        return None, "which code it ran is not recorded"
    source = entry["source"]
    if not (references.ROOT / source).is_file():
        return None, "this copy of the course cannot tell whether it ran today's code"
    stale, why = references.staleness(entry, source)
    if not stale:
        return True, "it ran today's code"
    what = "this lesson" if source.startswith("notebooks/") else source.rsplit("/", 1)[-1]
    return False, (f"it ran an older version of {what}" if f"{source} changed" in why else
                   "it ran an older version of the gpufeed package")


def sources(claim: Claim, number: str, cuda: bool) -> list[Source]:
    """Where the evidence for ``claim`` of lesson ``number`` comes from, on a machine with or without CUDA."""
    out = []
    if claim.here and (cuda or not claim.needs_cuda):
        out.append(Source(MEASURED_HERE, f"{claim.here}, in this run"))
    elif claim.here:
        out.append(Source(ON_A_GPU, f"{claim.here}: this page measures it where there is CUDA"))
    if claim.gpu and not (cuda and claim.here):
        stem = claim.reference or f"lesson{number}"
        ref = gpu_reference(stem)
        if ref is not None:
            path, doc = ref
            fresh, why = reference_freshness(path, stem)
            gpu = (doc.get("machine") or {}).get("gpu") or path.parent.name
            when = (results.measured_on(doc) or references.load(path.parent).get(stem, {}).get("when")
                    or "on a date not recorded")
            out.append(Source(OUR_GPU, f"{gpu}, measured {when.replace('on a date', 'a date')}; {why}", fresh=fresh))
        figures = {f.id: f for f in published.load()}
        by_source: dict[str, list] = {}
        for fid in claim.published:  # one line per source, each figure with what it measured and on what
            by_source.setdefault(figures[fid].url, []).append(figures[fid])
        for url, figs in by_source.items():
            numbers = "; ".join(f"{f.number()} {f.unit}{f.reading()}{' (the unit as we read the source)' if f.note else ''}"
                                f" on {f.hardware} ({f.measured})" for f in figs)
            out.append(Source(PUBLISHED, f"by {figs[0].publisher}, {figs[0].title}: {numbers}", link=url))
        if ref is None and not claim.published:
            out.append(Source(NOT_YET, "no GPU run of ours holds it, and we found no published figure that measured it"))
    return out


def lacks_gpu_number(x: Lesson) -> bool:
    """Whether a GPU claim of lesson ``x`` has no committed GPU reference of ours (what a references-first
    GPU run makes first)."""
    return any(c.gpu and gpu_reference(c.reference or x.owner) is None for c in x.claims)


def box(number: str, cuda: bool) -> str:
    """The evidence box of lesson ``number`` as Markdown: each claim, then its sources as a list."""
    x = lesson(number)
    lines = ["**Evidence on this page**", ""]
    for i, claim in enumerate(x.claims, 1):
        lines.append(f"{i}. {claim.says}")
        for s in sources(claim, number, cuda):
            link = f" ([source]({s.link}))" if s.link else ""
            lines.append(f"    - *{s.kind}*: {s.text}{link}")
    return "\n".join(lines)


def show(number: str, cuda: bool) -> None:
    """Shows :func:`box` rendered in a notebook, as text elsewhere."""
    from gpufeed.data.progress_bar import in_a_notebook

    text = box(number, cuda)
    if in_a_notebook():
        from IPython.display import Markdown, display

        display(Markdown(text))
    else:
        print(text)

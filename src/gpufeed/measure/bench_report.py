"""What a ``gpufeed bench`` run reads as, for people: the bounds in words, the Markdown table the
README quotes, and the two plots :func:`gpufeed.measure.suite.run` saves beside ``results.json``.

Example:
    >>> doc = {"ceilings": {}, "records": []}
    >>> bound_lines(doc)
    []
"""

from __future__ import annotations

from pathlib import Path

from gpufeed.measure import pipelines


def model_name(doc: dict) -> str:
    """The training step's model as the results name it (files from before the field: ResNet-18)."""
    return pipelines.MODELS[doc["workload"].get("model", "resnet18")]


def bound_lines(doc: dict) -> list[str]:
    """The raw fetch as a fraction of the streaming copy measured in the same run, and each course
    pipeline against its bandwidth bound; nothing for a file from before these were measured.

    Example:
        >>> doc = {"ceilings": {"fetch_of_stream": 0.97, "stream_gb_per_s": 12.5,
        ...                     "bandwidth_bound": {"course": {"bytes_per_image": 752640, "images_per_s": 16608.4}}},
        ...        "records": [{"pipeline": "course", "mode": "loader", "images_per_s": 5813.0,
        ...                     "fraction_of_bandwidth_bound": 0.35}]}
        >>> for line in bound_lines(doc):
        ...     print(line)
        raw batch fetch: 97% of the streaming copy of the same rows into the same buffers (this run)
        course: 35% of its bandwidth bound, 16,608 images/s (752,640 bytes read and written per image at the streaming copy's 12.5 GB/s)
        >>> bound_lines({"ceilings": {}, "records": []})
        []
    """
    c = doc["ceilings"]
    if "fetch_of_stream" not in c:
        return []
    lines = [f"raw batch fetch: {c['fetch_of_stream']:.0%} of the streaming copy of the same rows into the same "
             "buffers (this run)"]
    for r in doc["records"]:
        bound = c["bandwidth_bound"].get(r["pipeline"])
        if r["mode"] == "loader" and bound and r.get("fraction_of_bandwidth_bound") is not None:
            lines.append(f"{r['pipeline']}: {r['fraction_of_bandwidth_bound']:.0%} of its bandwidth bound, "
                         f"{bound['images_per_s']:,.0f} images/s ({bound['bytes_per_image']:,} bytes read and "
                         f"written per image at the streaming copy's {c['stream_gb_per_s']:g} GB/s)")
    return lines


def markdown(doc: dict) -> str:
    """The records as a Markdown table with the machine and sizes named, then :func:`bound_lines`
    as a list: what the README quotes (a test keeps the README's copy equal to the committed
    file's)."""
    from gpufeed.measure.machine import describe

    w = doc["workload"]
    head = (f"Measured on {describe(doc['machine'])}, device `{doc['device']}`, "
            f"{'`--quick`' if doc['quick'] else 'full size'}: {w['n']} JPEGs of {w['jpeg_size'][0]}x{w['jpeg_size'][1]}, "
            f"{w['crop']}x{w['crop']} crops in batches of {w['batch']}; memmap built once in "
            f"{doc['memmap_build_s']:.1f} s.")
    by = {(r["pipeline"], r["mode"]): r for r in doc["records"]}
    c = doc["ceilings"]
    model = model_name(doc)
    if "memcpy_stream_images_per_s" not in c:  # a file from before the honest ceilings: its old table
        rows = []
        for name in [r["pipeline"] for r in doc["records"] if r["mode"] == "train"]:
            loader, train = by.get((name, "loader")), by[name, "train"]
            rate, ratio = (f"{loader['images_per_s']:,.0f}", f"{loader['ratio_to_naive']:.2f}x") if loader else ("-", "-")
            rows.append([name, rate, ratio, f"{train['images_per_s']:,.1f}", f"{train['fraction_of_ceiling']:.2f}"])
        header = ["pipeline", "loader alone, images/s", "vs naive", f"with a {model} step, images/s", "loader efficiency"]
        return head + "\n\n" + _table(header, rows)
    head += (f" Ceilings for the loader alone: the memmap's images streamed by memcpy, "
             f"{c['memcpy_stream_images_per_s']:,.0f} images/s; the raw batch fetch (FastLoader's gather alone), "
             f"{c['batch_fetch_images_per_s']:,.0f} images/s.")
    cores = any(r.get("cores_busy") is not None for r in doc["records"])  # files from before it lack the column
    header = ["pipeline", "loader alone, images/s", "vs naive", "of memcpy stream", "of raw fetch",
              "peak memory (PSS), MB", *(["cores busy"] if cores else []), f"with a {model} step, images/s",
              "loader efficiency"]
    rows = []
    for name in dict.fromkeys(r["pipeline"] for r in doc["records"]):
        loader, train = by.get((name, "loader")), by.get((name, "train"))
        cells = ["-"] * (len(header) - 1)
        if loader:
            mb, busy = loader.get("peak_pss_mb"), loader.get("cores_busy")
            cells[:5] = [f"{loader['images_per_s']:,.0f}",
                         "-" if loader["ratio_to_naive"] is None else f"{loader['ratio_to_naive']:.2f}x",
                         f"{loader['fraction_of_memcpy_stream']:.2f}", f"{loader['fraction_of_batch_fetch']:.2f}",
                         "-" if mb is None else f"{mb:,.0f}"]
            if cores:
                cells[5] = "-" if busy is None else f"{busy:.2f}"
        if train:
            cells[-2:] = [f"{train['images_per_s']:,.1f}", f"{train['fraction_of_ceiling']:.2f}"]
        rows.append([name, *cells])
    bounds = "".join(f"\n- {line}" for line in bound_lines(doc))  # files from before them: none
    return head + "\n\n" + _table(header, rows) + ("\n" + bounds if bounds else "")


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table: names left, numbers right. tabulate's ``pipe`` format is GitHub's
    table syntax with the alignment colons (its ``github`` format leaves them out); the cells are
    formatted here already (thousands separators, ``x``, ``-``), so tabulate must not parse them."""
    from tabulate import tabulate

    return tabulate(rows, headers=header, tablefmt="pipe", colalign=("left", *["right"] * (len(header) - 1)),
                    disable_numparse=True)


def plot(doc: dict, folder: str | Path) -> list[Path]:
    """``bench-loader.png`` and ``bench-train.png`` (and ``bench-memory.png``) of a run's document
    (:func:`gpufeed.measure.suite.load`) into ``folder``, beside its ``results.json``: images/s per
    pipeline with its ratio to naive, and the ceiling drawn as a line."""
    import matplotlib.pyplot as plt

    from gpufeed.measure import plotting

    folder = Path(folder)
    written = []
    for mode, title, ceiling_label in (("loader", "loader alone", f"ceiling: {doc['ceilings']['wire']}"),
                                       ("train", f"loader + {model_name(doc)} training step",
                                        "data already on the device")):
        rows = [r for r in doc["records"] if r["mode"] == mode]
        shown = [r for r in rows if r["pipeline"] != "resident"]
        fig, ax = plt.subplots(figsize=(7, 3.2))
        labels = [plotting.ratio_label(r["pipeline"], r["ratio_to_naive"] or 1.0) for r in shown]
        colors = [plotting.COLORS["baseline"] if r["pipeline"] == "naive" else plotting.COLORS["compute"] for r in shown]
        rates = [r["images_per_s"] for r in shown]
        spread = [[max(0.0, v - r["images_per_s_iqr"][0]) for v, r in zip(rates, shown)],
                  [max(0.0, r["images_per_s_iqr"][1] - v) for v, r in zip(rates, shown)]]
        ax.barh(labels, rates, color=colors, xerr=spread, capsize=3)  # whiskers: the IQR of the passes
        ceiling = doc["ceilings"]["loader_images_per_s"] if mode == "loader" else next(
            (r["images_per_s"] for r in rows if r["pipeline"] == "resident"), None)
        lines = [(ceiling, "k", "--", ceiling_label)] if ceiling and (mode == "train" or ceiling < 20 * max(rates)) else []
        if mode == "loader" and "memcpy_stream_images_per_s" in doc["ceilings"]:
            lines += [(doc["ceilings"]["memcpy_stream_images_per_s"], "tab:red", ":", "memcpy stream of the memmap"),
                      (doc["ceilings"]["batch_fetch_images_per_s"], "tab:purple", "-.", "raw batch fetch")]
        for x, color, style, label in lines:
            ax.axvline(x, color=color, ls=style, lw=1, label=label)
        if lines:
            ax.legend(loc="lower right", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("images/s (higher is better)")
        ax.set_title(f"{title}, {doc['workload']['crop']}px batches of {doc['workload']['batch']} on {doc['device']}")
        plotting.caption(fig, doc["machine"], "quick mode (--quick)" if doc["quick"] else "")
        written.append(plotting.save(fig, folder / f"bench-{mode}.png"))
        plt.close(fig)
    mem = [r for r in doc["records"] if r["mode"] == "loader" and r.get("peak_pss_mb") is not None]
    if mem:  # memory beside speed: the peak PSS of each loader's process and workers
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ax.barh([r["pipeline"] for r in mem], [r["peak_pss_mb"] for r in mem], color=plotting.COLORS["compute"])
        ax.invert_yaxis()
        ax.set_xlabel("peak memory, MB (PSS of the process and its workers; lower is better)")
        ax.set_title(f"loader alone: peak memory, {doc['workload']['crop']}px batches on {doc['device']}")
        plotting.caption(fig, doc["machine"], "quick mode (--quick)" if doc["quick"] else "")
        written.append(plotting.save(fig, folder / "bench-memory.png"))
        plt.close(fig)
    return written

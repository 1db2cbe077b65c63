"""The Jupyter extension: `%load_ext gpuguard`, then `%gpuguard` shows, inline in the notebook, whether
the kernel runs under gpuguard, the container's live usage per device (and the kernel's own), and
the latest report's HTML page (timeline, flame graph, tables), so a notebook user sees who holds
what without leaving the notebook.

    %gpuguard                 usage, and the newest report in GPUGUARD_REPORT_DIR (or the current folder)
    %gpuguard usage           usage only
    %gpuguard report [PATH]   a report's page (a file, or the newest in a folder)

The kernel itself must run under the shim for its allocations to be counted: start Jupyter with
`python -m gpuguard run --limit 8GiB -- jupyter lab` (the kernels inherit it)."""
import glob
import html
import os
import subprocess

import gpuguard
from gpuguard import _native


def _size(n):
    if n is None:
        return "none"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.2f %s" % (n, unit))
        n /= 1024.0


def usage_html(u=None):
    u = u or gpuguard.usage()
    rows = "".join(
        "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
            i, html.escape(d["name"] or ""), _size(d["limit"]), _size(d["used"]), _size(d["peak"]),
            _size(d["process"]), _size(d["total"]))
        for i, d in sorted(u["devices"].items()))
    table = ("<table class='gpuguard-usage'><tr><th>gpu</th><th>name</th><th>limit</th><th>container used"
             "</th><th>container peak</th><th>this kernel</th><th>physical</th></tr>%s</table>" % rows
             if rows else "<p>No device in the ledger yet%s.</p>" % (": " + html.escape(u["note"]) if u["note"] else ""))
    return "<div class='gpuguard'><p><b>%s</b></p>%s</div>" % (html.escape(gpuguard.status()), table)


def latest_report(where=None):
    """The newest gpuguard-*.json in WHERE (a folder), else GPUGUARD_REPORT_DIR or the current folder."""
    where = where or os.environ.get("GPUGUARD_REPORT_DIR") or "."
    if os.path.isfile(where):
        return where
    found = glob.glob(os.path.join(where, "gpuguard-*.json"))
    return max(found, key=os.path.getmtime) if found else None


def report_html(path):
    """The report's self-contained page, in an iframe (its script and style stay its own). The
    sandbox lets its script run and nothing else: the page needs no origin, storage, form, popup or
    navigation, so a report crafted to carry script reaches neither the notebook nor its kernel."""
    p = subprocess.run([_native.command() or "gpuguard", "report", "--html", "-", path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        return "<p>gpuguard report %s: %s</p>" % (html.escape(path), html.escape(p.stderr.strip()))
    return ("<p>Report <code>%s</code></p><iframe class='gpuguard-report' sandbox='allow-scripts' srcdoc=\"%s\" "
            "style='width:100%%;height:720px;border:1px solid #ccc'></iframe>"
            % (html.escape(path), html.escape(p.stdout, quote=True)))


def magic(line):
    from IPython.display import HTML, display
    words = line.split()
    what = words[0] if words else ""
    parts = []
    if what in ("", "usage"):
        parts.append(usage_html())
    if what in ("", "report"):
        path = latest_report(words[1] if len(words) > 1 else None)
        parts.append(report_html(path) if path else "<p>No gpuguard report yet.</p>")
    if not parts:
        parts.append("<p>%%gpuguard [usage | report [PATH]]: no '%s'</p>" % html.escape(what))
    display(HTML("".join(parts)))


def register(ipython):
    ipython.register_magic_function(magic, magic_kind="line", magic_name="gpuguard")

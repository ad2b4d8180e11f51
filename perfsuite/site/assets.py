"""The files every page shares, written once into the site's ``assets/`` folder: plotly.js's
cartesian bundle (vendored in ``vendor/``, so the site asks nothing of the network), the
style sheet and the script that draws each page's figures."""

from __future__ import annotations

from pathlib import Path

from perfsuite.reporting.html import CSS

PLOTLY = "plotly-cartesian.min.js"
VENDOR = Path(__file__).parent / "vendor"

SITE_CSS = (
    CSS
    + """
nav { font-weight: 600; margin-bottom: 10px; } nav a { text-decoration: none; }
.meta, .hint, .crumbs { color: #555; } .hint { font-size: 12px; }
td.status { font-weight: 700; text-transform: uppercase; font-size: 11px; }
td.regression { color: #c62828; } td.slow-node { color: #e65100; } td.improvement { color: #2e7d32; }
td.ok { color: #1565c0; } td.no-run-tonight { color: #9e9e9e; }
tr.key.regression { background: #fdecea; } tr.key.slow-node { background: #fff3e0; }
span.status.regression, .open { color: #c62828; } span.status.slow-node { color: #e65100; }
.recovered { color: #2e7d32; }
svg.spark { vertical-align: middle; }
#filter { width: 24em; padding: 3px 6px; }
.plot { width: 100%; min-height: 260px; }
ul.keys { columns: 2; font-size: 12px; }
h1 code { font-size: 17px; background: none; }
"""
)

SITE_JS = """// Draws each figure whose JSON the page carries inline (fetch() of a local file fails under file://).
(function () {
  document.querySelectorAll("script[type='application/json'][id$='-data']").forEach(function (data) {
    var element = document.getElementById(data.id.slice(0, -5));
    if (!element || typeof Plotly === "undefined") return;
    var figure = JSON.parse(data.textContent);
    Plotly.newPlot(element, figure.data, figure.layout, {responsive: true, displaylogo: false}).then(function () {
      element.setAttribute("data-drawn", "true");  // what a test or a timing waits for
    });
  });
  var filter = document.getElementById("filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var words = filter.value.toLowerCase().split(/\\s+/).filter(Boolean);
      document.querySelectorAll("tr.key").forEach(function (row) {
        var key = row.getAttribute("data-key").toLowerCase();
        row.hidden = !words.every(function (w) { return key.indexOf(w) >= 0; });
      });
    });
  }
})();
"""


def plotly_js() -> bytes:
    return (VENDOR / PLOTLY).read_bytes()


def files() -> dict[str, bytes]:
    """assets/NAME -> content."""
    return {PLOTLY: plotly_js(), "site.css": SITE_CSS.encode(), "site.js": SITE_JS.encode()}


def missing(folder: Path) -> bool:
    return not all((folder / "assets" / name).is_file() for name in (PLOTLY, "site.css", "site.js"))

"""Sphinx configuration for the cascadekit book.

The book renders notebooks that papermill already executed (``cascadekit book``
stages them next to these pages); it never executes anything itself, and it
builds and reads offline: sphinx-book-theme ships its assets on PyPI, and
sphinx-mathjax-offline copies MathJax into the book instead of loading it from a CDN.
Progress bars saved as ipywidgets show their text form: the widget manager would
load from a CDN, and a static book has no kernel to drive a widget anyway.
"""
project = "cascadekit"
author = "the cascadekit authors"
extensions = ["myst_nb", "sphinx-mathjax-offline"]
nb_execution_mode = "off"
nb_ipywidgets_js = {}  # no CDN widget manager (see above)
nb_render_markdown_format = "myst"  # Markdown outputs (the chapters' claim tables) as MyST: tables and math render
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
html_theme = "sphinx_book_theme"
html_title = "cascadekit: reasoning-model post-training, end to end"
html_theme_options = {"show_navbar_depth": 2, "use_download_button": False}
# timings.md is included by setup.md, syllabus.md by teaching.md; the guide's data is cascadekit/chapters/chapters.yaml
exclude_patterns = ["_build", "**.ipynb_checkpoints", "timings.md", "syllabus.md"]
suppress_warnings = ["mystnb.unknown_mime_type"]

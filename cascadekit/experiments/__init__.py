"""The Interplay paper's findings as runnable experiments, one module per finding.

Each module holds the experiment's pieces (data recipes, budgets, training and
evaluation steps), a ``run(...)`` that chains them and a ``main`` whose toy-scale
run writes the committed results under ``data/results/<chapter>/``. Helpers two
findings share live in :mod:`cascadekit.experiments.common`.
"""

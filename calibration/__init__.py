"""Calibration: the published measurements (data/), the rows made concrete under the product's own
verdicts (rows.py, memory_rows.py), the accuracy report (report.py) and the fit of the oracle's
constants (fit.py: `python -m paratune.calibration.fit`). Nothing under oracle/ imports this package."""

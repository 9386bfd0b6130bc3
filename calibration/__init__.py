"""Calibration: the published measurements (data/), the rows made concrete under the product's own
verdicts (rows.py, memory_rows.py) and the accuracy report (report.py). The fit lives in
scripts/fit_calibration.py. Nothing under oracle/ imports this package."""

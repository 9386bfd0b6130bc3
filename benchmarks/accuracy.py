"""Accuracy: projected vs measured tokens/s/GPU and per-GPU memory for every published row, under the
product's own verdicts (calibration/report.py). The last line is `mape=X% max_abs_err=Y% rows=N rejected=R`."""

from __future__ import annotations

from paratune.calibration.report import main

if __name__ == "__main__":
    main()

"""Accuracy: projected vs measured tokens/s/GPU and per-GPU memory for every published row, under the
product's own verdicts (calibration/report.py). The last line is `mape=X% max_abs_err=Y% rows=N rejected=R`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.report import main  # noqa: E402

if __name__ == "__main__":
    main()

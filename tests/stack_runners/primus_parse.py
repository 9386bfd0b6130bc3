"""Run Primus's own `PrimusParser` on experiment files (a conformance-test helper, run as a script in a child
process with a scratch working directory: the parser writes `./output/...` under it).

stdin: JSON {"primus": <snapshot folder>, "experiments": [<path>, ...], "module": "pre_trainer"}
stdout (last line): JSON list, per experiment {"ok": bool, "error": str, "args": {key: value}} with the
trainer module's merged arguments (`PrimusConfig.get_module_config`), as the snapshot README runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile


def main() -> None:
    request = json.load(sys.stdin)
    sys.path.insert(0, request["primus"])
    from primus.core.launcher.parser import PrimusParser
    from primus.core.utils import yaml_utils

    os.chdir(tempfile.mkdtemp(prefix="primus-parse-"))
    results = []
    for experiment in request["experiments"]:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                config = PrimusParser().parse(argparse.Namespace(config=experiment, backend_path=None,
                                                                 export_config=None))
                module = config.get_module_config(request.get("module", "pre_trainer"))
            args = yaml_utils.nested_namespace_to_dict(module)
            results.append({"ok": True, "error": "", "args": json.loads(json.dumps(args, default=str))})
        except BaseException as exc:  # the parser asserts on missing keys and raises on missing presets
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}", "args": {}})
    print(json.dumps(results))


if __name__ == "__main__":
    main()

"""`python -m dynashape pgo {show,clear,list} [KEY]`: read and manage PGO profiles.
`python -m dynashape report DIR [-o OUT]`: an HTML report of the compile traces in DIR
(written by a run with `DYNASHAPE_TRACE=DIR`), merging every process and rank found there.

KEY is a job id (`DYNASHAPE_JOB_ID`), or the path of a script (its profile key when run without a
job id), or a key as `pgo list` prints it. Without KEY, `show` uses `DYNASHAPE_JOB_ID` when set,
else shows every profile in the store; `clear` needs a KEY, `DYNASHAPE_JOB_ID`, or `--all`.
"""
from __future__ import annotations

import argparse
import os
import sys

from .fleet import pgo
from .fleet import pgo_store
from .runtime.config import config


def _key(arg: str | None) -> str | None:
    if arg is None:
        return config.job_id or None
    if arg.endswith(".py") and os.path.isfile(arg):
        return os.path.abspath(arg)  # a script's profile key is its absolute path
    return arg


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dynashape", description="dynashape command-line tools")
    sub = ap.add_subparsers(dest="tool", required=True)
    p = sub.add_parser("pgo", help="show or clear profile-guided (PGO) dynamic-shape profiles")
    p.add_argument("action", choices=("show", "clear", "list"))
    p.add_argument("key", nargs="?", help="job id, script path, or key from `pgo list`")
    p.add_argument("--all", action="store_true", help="with clear: remove every profile in the store")
    r = sub.add_parser("report", help="an HTML report of compile traces (DYNASHAPE_TRACE=DIR)")
    r.add_argument("dir", help="a trace directory (or one trace file)")
    r.add_argument("-o", "--out", default=None, help="output directory (default: DIR/report)")
    args = ap.parse_args(argv)
    if args.tool == "report":
        return _report(args.dir, args.out)
    where = pgo_store.pgo_dir() + (f" and {config.pgo_remote}" if config.pgo_remote else "")
    key = _key(args.key)
    if args.action == "list":
        for k in pgo.keys():
            print(k)
        return 0
    if key is not None:  # a script run under torch.distributed has one profile per rank
        key = [k for k in pgo.keys() if k == key or k.startswith(key + ":rank")] or [key]
    if args.action == "show":
        found = key if key is not None else pgo.keys()
        if not found:
            print(f"no PGO profiles in {where}")
        for i, k in enumerate(found):
            if len(found) > 1:
                print(("\n" if i else "") + f"== {k}")
            print(pgo.render(k))
        return 0
    if args.all:
        keys = pgo.keys()
        for k in keys:
            pgo.clear(k)
        print(f"removed {len(keys)} PGO profile(s) from {pgo_store.pgo_dir()}")
        return 0
    if key is None:
        print("pgo clear: give a KEY (see `python -m dynashape pgo list`), set DYNASHAPE_JOB_ID, or pass --all",
              file=sys.stderr)
        return 2
    for k in key:
        if pgo.clear(k):
            print(f"removed the PGO profile {k!r} from {where}")
        else:
            print(f"no PGO profile {k!r} in {where}")
    return 0


def _report(directory: str, out: str | None) -> int:
    from .logs import report, report_html
    if not os.path.exists(directory):
        print(f"report: {directory} does not exist", file=sys.stderr)
        return 2
    runs = report.load(directory)
    if not runs:
        print(f"report: no dynashape trace files in {directory} (run with DYNASHAPE_TRACE={directory})",
              file=sys.stderr)
        return 1
    out = out or os.path.join(directory if os.path.isdir(directory) else os.path.dirname(directory), "report")
    index = report_html.write_site(runs, out)
    n = sum(len(f.compiles) for r in runs for f in r.functions.values())
    print(f"{len(runs)} run(s), {n} compile(s); open file://{os.path.abspath(index)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The main job on the embedded default: real queries write checkpoints locally, then each is inspected.

Until the maintenance pass exists (issues 3-7) this is what `make demo` runs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from jobs.corpus import MANIFEST, checkpoints

DEMO_SCENARIOS = ("long_chain", "snapshots", "killed", "join", "list_state")


def _generate(out: Path) -> bool:
    """Runs the generator, showing its progress lines; Spark's and PySpark's chatter goes to a log."""
    log_path = out.parent / "generate.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-u", "-m", "jobs.corpus", str(out), "--only", *DEMO_SCENARIOS]
    with (
        open(log_path, "w") as log,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc,
    ):
        for line in proc.stdout:
            log.write(line)
            if line.startswith("corpus:"):
                print("  " + line.rstrip(), flush=True)
    if proc.returncode != 0 or not (out / MANIFEST).exists():
        print(
            f"demo: generating the checkpoints failed (exit {proc.returncode}); see {log_path}",
            file=sys.stderr,
        )
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("demo-output/checkpoints"))
    args = parser.parse_args(argv)

    if args.out.exists():
        shutil.rmtree(args.out)
    print(f"demo: running {len(DEMO_SCENARIOS)} streaming queries into {args.out} ...", flush=True)
    started = time.monotonic()
    if not _generate(args.out):
        return 1
    print(f"demo: checkpoints written in {time.monotonic() - started:.0f} s\n", flush=True)

    failed = 0
    for name, path in checkpoints(args.out).items():
        print(f"=== {name}: ckpt inspect {path}", flush=True)
        failed += (
            subprocess.run([sys.executable, "-m", "cli.main", "inspect", str(path)], check=False).returncode
            != 0
        )
        print(flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

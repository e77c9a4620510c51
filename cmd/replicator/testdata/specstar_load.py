"""Time SpecStar's own load of an archive into its disk factory.

Usage: specstar_load.py ARCHIVE OUTDIR MODEL[,MODEL...]

Needs SpecStar (the `autocrud` package, Python 3.12+) importable. Registers
each model with a generic resource type (the loader stores payloads byte
for byte, never decoding them with it), then prints the seconds that one
call, AutoCRUD.load, took: imports and setup are not counted.
"""

import sys
import time
from typing import Any

from autocrud import AutoCRUD
from autocrud.resource_manager.storage_factory import DiskStorageFactory


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    archive, out, models = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    crud = AutoCRUD(storage_factory=DiskStorageFactory(out))
    for model in models:
        crud.add_model(dict[str, Any], name=model)
    with open(archive, "rb") as f:
        start = time.perf_counter()
        crud.load(f)
        took = time.perf_counter() - start
    print(f"{took:.6f}")


if __name__ == "__main__":
    main()
